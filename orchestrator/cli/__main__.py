from orchestrator.cli import app

app()
