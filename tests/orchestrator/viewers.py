"""A tracked run opened in its trackers' own viewers, as the console's commands open
it: MLflow's UI and TensorBoard served from this environment, read in headless
Chromium (issue 79: names cut before the seed, n and seed shown as 4.0000)."""

import contextlib
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.orchestrator.e2e import free_port

CHROMIUM = shutil.which("chromium")


@contextlib.contextmanager
def served(argv: list[str], health: str, log: Path, timeout_s: float = 120):
    """Runs a viewer's server until the block ends, once `health` answers."""
    server = subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                urllib.request.urlopen(health, timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"{argv[0]} never answered at {health}: {log.read_text()[-2000:]}")
                time.sleep(0.5)
        yield
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def tool(name: str) -> str:
    """A viewer's command in this environment (the viewers' extra installs each)."""
    return str(Path(sys.executable).parent / name)


def mlflow_table(browser, opened_line: str, db: Path, folder: Path) -> dict:
    """The runs table the console's MLflow line opens (its address, on a port of its
    own): each run's name with whether it shows whole (its text inside its cell), and
    the table's column headers and rows' cells."""
    port = free_port()
    url = re.search(r"http://127\.0\.0\.1:5000(/#/experiments/\S+)", opened_line).group(1)
    argv = [tool("mlflow"), "ui", "--backend-store-uri", f"sqlite:///{db}", "--port", str(port)]
    with served(argv, f"http://127.0.0.1:{port}/health", folder / "mlflow-ui.log"):
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"http://127.0.0.1:{port}{url}")
        page.locator("[role=gridcell] a").first.wait_for(timeout=60_000)
        with contextlib.suppress(PlaywrightTimeout):  # the view's column widths land after the rows
            page.wait_for_function(f"() => (s => s.names.length && s.names.every(([, whole]) => whole))(({SEEN})())",
                                   timeout=20_000)
        return page.evaluate(SEEN)


# Each run name with whether it shows whole (no box between its text and its cell cuts
# it), the column headers, and each row's cells by column id.
SEEN = """() => ({
    names: [...document.querySelectorAll('[role=row] [role=gridcell] a')].map(a => {
        const cell = a.closest('[role=gridcell]');
        let cut = [...a.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1);
        for (let e = a; e && e !== cell.parentElement; e = e.parentElement) {
            cut = cut || e.scrollWidth > e.clientWidth + 1;
        }
        return [a.innerText, !cut && a.getBoundingClientRect().right <= cell.getBoundingClientRect().right];
    }),
    headers: [...document.querySelectorAll('[role=columnheader]')].map(h => h.innerText.trim()),
    rows: [...document.querySelectorAll('.ag-center-cols-container [role=row]')].map(
        r => Object.fromEntries([...r.querySelectorAll('[role=gridcell]')].map(
            c => [c.getAttribute('col-id'), c.innerText.trim()])))})"""


def hparams_table(browser, run: Path, folder: Path) -> dict[str, dict]:
    """TensorBoard's HParams table of the run directory, as it shows it: each trial's
    row (by its name, the Trial ID), its cells by column header."""
    port = free_port()
    argv = [tool("tensorboard"), "--logdir", str(run), "--port", str(port)]
    with served(argv, f"http://127.0.0.1:{port}/", folder / "tensorboard.log"):
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"http://127.0.0.1:{port}/#hparams")
        cell = page.locator("vaadin-grid-cell-content")  # the table's cells, headers first (through shadow roots)
        page.get_by_text(re.compile(r"-s\d+$")).first.wait_for(timeout=60_000)
        texts = [text.strip() for text in cell.all_inner_texts()]
        headers = texts[:texts.index("")]
        names = [i for i, text in enumerate(texts) if i >= len(headers) and re.search(r"-s\d+$", text)]
        return {texts[i]: dict(zip(headers, texts[i:i + len(headers)])) for i in names}
