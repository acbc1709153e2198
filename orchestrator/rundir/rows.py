"""A trial's result rows: written (one function for a sweep's trial and `train
--out`'s), read on the timeline the trial continued, and repaired where a kill or
a full disk cut them short.
"""

import json
import math
import os
from pathlib import Path
from typing import Callable, Optional

from orchestrator.rundir.layout import (DAMAGED_GLOB, DAMAGED_RESULTS, EARLIER_RESULTS, FAILS_AGAIN, PARAMS_FILE, RESULTS_FILE,
                                        STARTED_OVER_FILE, free_name, free_path)
from orchestrator.rundir.records import tune_statuses
from orchestrator.storage import is_remote
from workloads.metrics import METRICS
from workloads.results import LATEST as METRIC_KEYS  # a trial's latest figures (status, report, results.csv)


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

    def set_aside_for_start_over(self) -> None:
        """The rows of a trial that starts over from sample 0 (its checkpoints gone),
        those from before a rebuild too, moved to STARTED_OVER_FILE (a free name): the
        trial's results are its new rows alone, and none is written twice."""
        for path in (self.dir / EARLIER_RESULTS, self.results):
            if path.is_file():
                os.replace(path, free_path(self.dir, STARTED_OVER_FILE))

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


def set_aside_stored_rows(fs, stored: str, files: TrialFiles) -> str:
    """The rows of a trial that starts over from sample 0 (its checkpoints gone),
    those from before a rebuild too, set aside in its directory `stored` on the
    pyarrow filesystem `fs`, each under a name free there and in `files`' folder
    (STARTED_OVER_FILE, then -2, ...), and `files`' copies of them dropped: the
    trial's results are its new rows alone. `files` is the driver's local copy of
    the directory (Ray's staging folder, which Tune's sync copies over the run
    directory): set aside there alone, under a name free there, it replaced an
    earlier set-aside or a user's file of that name (issue 83, class 4). Returns
    what went wrong, or ''."""
    import pyarrow.fs

    stored = stored.rstrip("/")
    if isinstance(fs, pyarrow.fs.LocalFileSystem) and Path(stored).resolve() == files.dir.resolve():
        files.set_aside_for_start_over()  # one folder: set aside in place
        return ""
    for name in (EARLIER_RESULTS, RESULTS_FILE):  # copies of the stored rows
        (files.dir / name).unlink(missing_ok=True)
    try:
        there = {info.base_name: info.type for info in
                 fs.get_file_info(pyarrow.fs.FileSelector(stored, allow_not_found=True))}
        taken = set(there) | set(os.listdir(files.dir) if files.dir.is_dir() else ())
        for name in (EARLIER_RESULTS, RESULTS_FILE):
            if there.get(name) == pyarrow.fs.FileType.File:
                target = free_name(taken, STARTED_OVER_FILE)
                taken.add(target)
                fs.move(f"{stored}/{name}", f"{stored}/{target}")
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    return ""


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
    """The result rows of a trial, and the problems met: a line that is not a row
    (not JSON, cut short, a row without its sample count, a metric that is not a
    number) is skipped and named."""
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
        row, wrong = as_row(line)
        if row is not None:
            rows.append(row)
        else:
            cut = ": cut short, as by a killed process" if number == len(lines) and wrong == "not JSON" else ""
            problems.append(f"{path.name} line {number} is not a result ({wrong}{cut}); skipped")
    return rows, problems


# The largest sample count a row may hold: every count up to it is exact as a float
# (JSON's numbers are read as such by other tools), and a budget past it never ends.
MAX_SAMPLES = 2**53


def as_row(line: str) -> tuple[Optional[dict], str]:
    """(the row, "") where a result.json line is one, else (None, what is wrong): a
    JSON object with its sample count (a whole number from 0 to MAX_SAMPLES), whose
    figures are numbers in their range (none negative; an accuracy at most 1), nan
    only for one not measured: a metric every evaluation measures (its tally) is
    finite in an evaluation's row. A line of anything else would otherwise leave a
    finished trial "interrupted", count as an evaluation at no sample count, or (an
    infinite or NaN exact match, samples 1e30) crash the report or rank first."""
    try:
        row = json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        return None, "not JSON"
    if not isinstance(row, dict):
        return None, f"a JSON {type(row).__name__}, not an object"
    if "samples" not in row:
        return None, f"no samples (its keys: {', '.join(sorted(row)[:8]) or 'none'})"
    bad = [f"{key} is {json.dumps(row[key])}" for key in METRIC_KEYS if key in row and not _in_range(key, row)]
    return (None, ", ".join(bad)) if bad else (row, "")


def _in_range(key: str, row: dict) -> bool:
    """Whether a row's figure `key` is one a trial can report (as_row)."""
    value = row[key]
    if key == "samples":
        return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                and value == int(value) and 0 <= value <= MAX_SAMPLES)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return not (key in METRICS and METRICS[key].tally is not None and row.get("evaluated", True))
    upper = METRICS[key].upper if key in METRICS else None
    return (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value >= 0
            and (upper is None or value <= upper))


def _timeline(rows: list[dict]) -> list[dict]:
    """The rows of the run a trial really continued: a trial restarted from an older
    checkpoint reports again from there, and the rows it left behind are dropped,
    so that no evaluation counts twice. A trial trains nothing after its final
    evaluation: where rows after it (a row appended again, rows swapped) would drop
    that final row, its rows are taken in order of their samples (each count's last
    report) up to it, so that neither a duplicate nor an order hides a row."""
    out = []
    for row in rows:
        samples = row.get("samples")
        while out and samples is not None and out[-1].get("samples") is not None and out[-1]["samples"] >= samples:
            out.pop()
        out.append(row)
    final = next((r for r in rows if r.get("final_eval")), None)
    if final is None or (out and out[-1].get("final_eval")):
        return out
    last = {}
    for row in rows:
        if row.get("samples", 0) <= final["samples"]:
            last[(row["samples"], row.get("evaluated", True))] = row
    last[(final["samples"], final.get("evaluated", True))] = final
    return sorted(last.values(), key=lambda r: (r["samples"], r.get("evaluated", True), bool(r.get("final_eval"))))


def trial_rows(trial_dir: Path) -> tuple[list[dict], list[str]]:
    """Every result row of a trial (those from before a rebuild first) that holds
    numbers, on the timeline it continued; and the problems met, a repair by
    `resume` among them."""
    rows, problems = [], []
    for name in (EARLIER_RESULTS, RESULTS_FILE):
        found, wrong = _read_results(Path(trial_dir) / name)
        rows += found
        problems += wrong
    kept = sorted(p.name for p in Path(trial_dir).glob(DAMAGED_GLOB))
    if kept:
        problems.append(f"result.json was repaired by a resume (the file as it was: {', '.join(kept)})")
    return _timeline(rows), problems


def read_results(trial_dir: Path) -> list[dict]:
    """A trial's result rows as status and report read them: rows that hold numbers,
    on the timeline the trial continued."""
    return trial_rows(trial_dir)[0]


def parse_rows(text: str) -> list[dict]:
    """The rows of a result.json's text (`as_row`: a line cut short, or that is no
    row, is not)."""
    return [row for row in (as_row(line)[0] for line in text.splitlines() if line.strip()) if row is not None]


def row_stored(rows: list[dict], row: dict) -> bool:
    """Whether `rows` hold `row`: one at its sample count, an evaluation or not alike."""
    evaluated = row.get("evaluated", True)
    return any(r.get("samples") == row.get("samples") and r.get("evaluated", True) == evaluated for r in rows)


def catch_up(stored: list[dict], rows: list[dict], report: Callable[[dict], None],
             say: Optional[Callable[[str], None]] = None) -> None:
    """What a resumed trial does first, on either host (a sweep's worker, `train`):
    `rows` are those its checkpoint was reported with (its evaluations, then its own
    row); from the first one the `stored` rows lack (a worker killed between the
    two, a stop's checkpoint found on disk, a row cut short by a full disk), each is
    reported again, in order, which keeps the trial's timeline whole (a row
    reported twice replaces the earlier one on it)."""
    first = next((i for i, row in enumerate(rows) if not row_stored(stored, row)), len(rows))
    for row in rows[first:]:
        if say is not None:
            say(f"its results lack a row of the checkpoint it continues from ({row.get('samples', 0):,} samples); "
                "reporting it")
        report(row)


def checkpoint_folders(trial_dir: Path) -> list[Path]:
    """The trial's checkpoint folders, newest first: its own, or for a member of an
    array (its params.json names the array), its folder in each of the array's."""
    own = sorted(trial_dir.glob("checkpoint_*"), reverse=True)
    try:
        array = json.loads((trial_dir / PARAMS_FILE).read_text()).get("array")
    except (OSError, ValueError, AttributeError):
        array = None
    if not isinstance(array, str) or not array:
        return own
    return own + [folder / trial_dir.name for folder in sorted(trial_dir.parent.glob(f"{array}/checkpoint_*"), reverse=True)]


def _newest_history(trial_dir: Path) -> list[dict]:
    """The evaluations kept in the trial's newest readable checkpoint."""
    from workloads.checkpoint import CHECKPOINT_FILE, CheckpointError, read_checkpoint

    for folder in checkpoint_folders(trial_dir):
        try:
            return list(read_checkpoint(folder / CHECKPOINT_FILE).get("history", []))
        except CheckpointError:
            continue
    return []


def restore_rows(run_dir: str) -> dict[str, str]:
    """Runs `repair_results` on each trial of a local run before it resumes, and
    clears the marks of failures that would repeat (a resume tries every failed
    trial once more: the machine may have changed); returns what was done, by trial."""
    if is_remote(run_dir):
        return {}
    for mark in Path(run_dir).glob(f"*/{FAILS_AGAIN}"):
        mark.unlink()
    statuses, _ = tune_statuses(run_dir)
    names = set(statuses) | {p.parent.name for p in Path(run_dir).glob(f"*/{RESULTS_FILE}")}
    done = {name: repair_results(Path(run_dir) / name, statuses.get(name)) for name in sorted(names)}
    return {name: what for name, what in done.items() if what}


def repair_results(trial_dir: Path, status: Optional[str] = None) -> str:
    """Makes a trial's result.json and its checkpoints one truth before it resumes:
    lines that are not rows (`as_row`: cut short, garbled, not a number) are dropped,
    and every evaluation the newest readable checkpoint holds that the rows lack is
    written back in its place. The checkpoint is read where a line was dropped, or
    where Tune recorded the trial finished (it will not run again to write its
    rows) and its final row is missing. The rows are rewritten, ending in a newline
    so that the next row appended is read, only when something was wrong, the file
    as it was set aside first (DAMAGED_RESULTS, numbered if one is there). Returns
    what was done ('' if nothing)."""
    results = trial_dir / RESULTS_FILE
    text = results.read_text(errors="replace") if results.exists() else ""
    rows = parse_rows(text)
    dropped = sum(1 for line in text.splitlines() if line.strip()) - len(rows)
    unfinished = status == "TERMINATED" and not (rows and rows[-1].get("final_eval"))
    missing = []
    if dropped or unfinished:
        earlier = trial_dir / EARLIER_RESULTS
        stored = rows + (parse_rows(earlier.read_text(errors="replace")) if earlier.exists() else [])
        missing = [r for r in _newest_history(trial_dir) if not row_stored(stored, r)]
    if not missing and not dropped and not (text and not text.endswith("\n")):
        return ""
    kept = _set_aside(results) if text else None
    tmp = results.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in _merged(rows, missing)))
    os.replace(tmp, results)
    what = []
    if dropped:
        what.append(f"{dropped} line(s) of its result.json were not results (cut short or garbled); set aside")
    if missing:
        at = ", ".join(f"{r.get('samples', 0):,}" for r in missing)
        what.append(f"evaluations its checkpoint holds were missing from its results; restored them (samples {at})")
    return "; ".join(what) + (f" (the file as it was is kept as {trial_dir.name}/{kept})" if kept else "")


def _merged(rows: list[dict], restored: list[dict]) -> list[dict]:
    """`rows` with the `restored` evaluations in their places: each before the first
    row of the timeline past its sample count (rows a restart left behind stay
    where they were: the readers drop them as before)."""
    out = list(rows)
    for row in sorted(restored, key=lambda r: r.get("samples", 0)):
        at = len(out)
        for i in range(len(out) - 1, -1, -1):
            if out[i].get("samples", 0) > row.get("samples", 0):
                at = i
            else:
                break
        out.insert(at, row)
    return out


def _set_aside(results: Path) -> str:
    """Moves a damaged result.json aside under a name no earlier repair used; returns it."""
    target = free_path(results.parent, DAMAGED_RESULTS)
    os.replace(results, target)
    return target.name
