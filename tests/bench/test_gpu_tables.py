"""docs/gpu.md's measured tables are bench/gpu_tables.py's rendering of bench/results/,
so that a figure on the page is the figure in its file (issue 78)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).parents[2]


def _tables():
    spec = importlib.util.spec_from_file_location("gpu_tables", ROOT / "bench" / "gpu_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_page_holds_the_tables_its_results_give():
    tables = _tables()
    page = (ROOT / "docs" / "gpu.md").read_text()
    assert tables.tables() in page


def test_a_changed_result_changes_the_page_that_quotes_it(tmp_path, monkeypatch):
    # The check reads the files: a figure edited in a results file no longer matches the page.
    import json
    import shutil

    tables = _tables()
    results = Path(shutil.copytree(ROOT / "bench" / "results", tmp_path / "results"))
    data = json.loads((results / "sweep_NVIDIA_H200.json").read_text())
    data["projections"]["sweeps/istree_grid.yaml"]["hours"] = 12.0
    (results / "sweep_NVIDIA_H200.json").write_text(json.dumps(data))
    monkeypatch.setattr(tables, "RESULTS", results)
    assert "| `sweeps/istree_grid.yaml` | 12.0 | 8 |" in tables.tables()
    assert tables.tables() not in (ROOT / "docs" / "gpu.md").read_text()
