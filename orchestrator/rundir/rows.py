"""A trial's result rows: written (one function for a sweep's trial and `train
--out`'s), read on the timeline the trial continued, and repaired where a kill or
a full disk cut them short.
"""

import json
import math
import os
from pathlib import Path
from typing import Callable, Optional

from orchestrator.rundir.layout import DAMAGED_RESULTS, EARLIER_RESULTS, PARAMS_FILE, RESULTS_FILE
from orchestrator.rundir.records import tune_statuses
from orchestrator.storage import is_remote
from workloads.metrics import METRICS, PROGRESS

METRIC_KEYS = (*PROGRESS, *METRICS)  # a trial's latest figures, as status, report and results.csv give them


class TrialFiles:
    """One trial's directory as it is written: its config, then a row per report,
    appended and flushed (what Tune's JSON logger wrote for a sweep's trial, and
    `train --out` for its own). `encoder`: a JSON encoder for values JSON lacks."""

    def __init__(self, trial_dir: Path | str, encoder: Optional[type] = None):
        self.dir = Path(trial_dir)
        self.encoder = encoder

    @property
    def params(self) -> Path:
        return self.dir / PARAMS_FILE

    @property
    def results(self) -> Path:
        return self.dir / RESULTS_FILE

    def write_config(self, config: dict) -> None:
        """params.json: {"trial": the trial's config, ...} (Tune's config of the trial)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.params.write_text(json.dumps(config, indent=1, sort_keys=True, cls=self.encoder))

    def start_afresh(self) -> None:
        """Drops the rows of a start that never checkpointed: the next rows begin anew."""
        self.results.unlink(missing_ok=True)

    def append(self, row: dict) -> None:
        with open(self.results, "a") as f:
            f.write(json.dumps(row, cls=self.encoder) + "\n")
            f.flush()

    def stored_rows(self) -> list[dict]:
        """The rows stored so far, as they are (for a resumed trial's check): read as
        a sweep's trial reads its own, through `stored_rows`."""
        return stored_rows(self._read_text)

    def _read_text(self, name: str) -> Optional[str]:
        path = self.dir / name
        return path.read_text(errors="replace") if path.exists() else None


def stored_rows(read_text: Callable[[str], Optional[str]]) -> list[dict]:
    """A trial's rows stored so far (those kept from before a rebuild first), where
    `read_text(file name)` reads a file of its directory (None when absent): the
    trainable reads them through the storage's filesystem."""
    rows = []
    for name in (EARLIER_RESULTS, RESULTS_FILE):
        text = read_text(name)
        rows += parse_rows(text) if text else []
    return rows


def _read_results(path: Path) -> tuple[list[dict], list[str]]:
    """The result rows of a trial, and the problems met (lines that are not JSON)."""
    if not path.exists():
        return [], []
    try:
        data = path.read_bytes()
    except OSError as e:  # a directory or a file it may not read: this trial's rows only are lost
        return [], [f"{path.name} cannot be read ({e.strerror or type(e).__name__}); its rows are not shown"]
    rows, problems = [], []
    lines = data.decode("utf-8", errors="replace").splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if isinstance(row, dict):
            rows.append(row)
        else:
            cut = " (cut short, as by a killed process)" if number == len(lines) else ""
            problems.append(f"{path.name} line {number} is not a result{cut}; skipped")
    return rows, problems


def _checked_rows(rows: list[dict], name: str) -> tuple[list[dict], list[str]]:
    """The rows whose metrics are numbers (nan for a metric not measured), and a
    problem for each row left out: a row with an infinite exact match or a list for
    its samples would otherwise crash the report or rank first."""
    kept, problems = [], []
    for number, row in enumerate(rows, 1):
        bad = []
        for key in METRIC_KEYS:
            value = row.get(key)
            if value is None or (isinstance(value, float) and math.isnan(value) and key != "samples"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                bad.append(f"{key} is {json.dumps(value)}")
        if bad:
            problems.append(f"{name} row {number}: {', '.join(bad)}; row skipped")
        else:
            kept.append(row)
    return kept, problems


def _timeline(rows: list[dict]) -> list[dict]:
    """The rows of the run a trial really continued: a trial restarted from an older
    checkpoint reports again from there, and the rows it left behind are dropped,
    so that no evaluation counts twice."""
    out = []
    for row in rows:
        samples = row.get("samples")
        while out and samples is not None and out[-1].get("samples") is not None and out[-1]["samples"] >= samples:
            out.pop()
        out.append(row)
    return out


def trial_rows(trial_dir: Path) -> tuple[list[dict], list[str]]:
    """Every result row of a trial (those from before a rebuild first) that holds
    numbers, on the timeline it continued; and the problems met."""
    rows, problems = [], []
    for name in (EARLIER_RESULTS, RESULTS_FILE):
        found, unreadable = _read_results(Path(trial_dir) / name)
        checked, wrong = _checked_rows(found, name)
        rows += checked
        problems += unreadable + wrong
    return _timeline(rows), problems


def read_results(trial_dir: Path) -> list[dict]:
    """A trial's result rows as status and report read them: rows that hold numbers,
    on the timeline the trial continued."""
    return trial_rows(trial_dir)[0]


def parse_rows(text: str) -> list[dict]:
    """The rows of a result.json's text that are JSON objects (a line cut short is not)."""
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def row_stored(rows: list[dict], row: dict) -> bool:
    """Whether `rows` hold `row`: one at its sample count, an evaluation or not alike."""
    evaluated = row.get("evaluated", True)
    return any(r.get("samples") == row.get("samples") and r.get("evaluated", True) == evaluated for r in rows)


def rows_unstored(stored: list[dict], rows: list[dict]) -> list[dict]:
    """The tail of `rows` (a resumed trial's, in order) from the first one `stored`
    lacks: reported again in order, it keeps the trial's timeline whole (a row
    reported twice replaces the earlier one on it)."""
    for i, row in enumerate(rows):
        if not row_stored(stored, row):
            return rows[i:]
    return []


def rows_to_restore(trial_dir: Path, rows: list[dict], status: Optional[str]) -> list[dict]:
    """The evaluation rows a trial's newest intact checkpoint holds that its stored
    `rows` lack, where Tune will not run the trial again to write them (it recorded
    it TERMINATED): a final row cut short, a result.json emptied. Empty otherwise."""
    if status != "TERMINATED" or (rows and rows[-1].get("final_eval")):
        return []
    history = _newest_history(trial_dir)
    done = max((r.get("samples", 0) for r in rows), default=0)
    return [r for r in history if r.get("samples", 0) > done]


def torn(text: str) -> bool:
    """Whether a result.json's text holds a row cut short (a full disk, a kill inside a
    write): a line that is not a JSON object, or a last line without its newline, onto
    which the next row Tune appends would be glued, and lost with it."""
    if text and not text.endswith("\n"):
        return True
    return len(parse_rows(text)) < sum(1 for line in text.splitlines() if line.strip())


def _newest_history(trial_dir: Path) -> list[dict]:
    """The evaluations kept in the trial's newest readable checkpoint."""
    from workloads.train import CHECKPOINT_FILE, CheckpointError, read_checkpoint

    for folder in sorted(trial_dir.glob("checkpoint_*"), reverse=True):
        try:
            return list(read_checkpoint(folder / CHECKPOINT_FILE).get("history", []))
        except CheckpointError:
            continue
    return []


def restore_rows(run_dir: str) -> dict[str, str]:
    """Runs `repair_results` on each trial of a local run before it resumes; returns
    what was done, by trial."""
    if is_remote(run_dir):
        return {}
    statuses, _ = tune_statuses(run_dir)
    names = set(statuses) | {p.parent.name for p in Path(run_dir).glob(f"*/{RESULTS_FILE}")}
    done = {name: repair_results(Path(run_dir) / name, statuses.get(name)) for name in sorted(names)}
    return {name: what for name, what in done.items() if what}


def repair_results(trial_dir: Path, status: Optional[str] = None) -> str:
    """Repairs a trial's result.json that `torn` finds cut short (its intact rows kept,
    so that the rows appended next are read) or that lacks the rows `rows_to_restore`
    finds (written back from the checkpoint). The file as it was is set aside first
    (DAMAGED_RESULTS, numbered if one is there). Returns what was done ('' if nothing)."""
    results = trial_dir / RESULTS_FILE
    text = results.read_text(errors="replace") if results.exists() else ""
    rows = parse_rows(text)
    missing = rows_to_restore(trial_dir, rows, status)
    cut = torn(text)
    if not missing and not cut:
        return ""
    kept = _set_aside(results) if text else None
    tmp = results.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows + missing))
    os.replace(tmp, results)
    what = []
    if cut:
        what.append("its result.json held a row cut short (a full disk or a kill mid-write); its intact rows are kept")
    if missing:
        what.append("Tune recorded it finished, but its results lacked evaluations its checkpoint holds; restored them")
    return "; ".join(what) + (f" (the file as it was is kept as {trial_dir.name}/{kept})" if kept else "")


def _set_aside(results: Path) -> str:
    """Moves a damaged result.json aside under a name no earlier repair used; returns it."""
    stem, suffix = Path(DAMAGED_RESULTS).stem, Path(DAMAGED_RESULTS).suffix
    k = 1
    while (target := results.parent / (DAMAGED_RESULTS if k == 1 else f"{stem}-{k}{suffix}")).exists():
        k += 1
    os.replace(results, target)
    return target.name
