"""What the tool prints, on any console: an ASCII one, a pipe whose reader leaves
(`launch | head -2`), and never a URL's secret (orchestrator.secrets.Console;
issue 83, classes 6 and 7)."""

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.secrets import Console
from tests.orchestrator.terminal import in_a_terminal, screen

ROOT = Path(__file__).parents[2]
MICRO = str(ROOT / "sweeps" / "istree_micro.yaml")

# A launch whose Ray and Tune are stand-ins: Tune's loop drives the real progress
# view (its lines hold ' · '), and the sweep prints past a reader that has left.
LAUNCH = """
import sys
from orchestrator.cli import app, sweep
import orchestrator.tune as tune
from orchestrator.progress import SweepProgress
from tests.orchestrator.test_progress import A, B, Table, t

sweep._start_ray = lambda opts, spec: {"cpu": 1, "gpu": 0}

def launch(spec, resources):
    view = SweepProgress(2, 8192, table=Table())
    for _ in range(200):
        view.report([t(A, status="RUNNING"), t(B)], done=False)
        view.report([t(A, status="RUNNING", samples=2048, iteration=1), t(B)], done=False)
        view.report([t(A), t(B)], done=False)
    print("the sweep ran to its end", file=sys.stderr)

tune.launch = launch
sys.argv = ["icr-sweep", "launch", sys.argv[1], "--storage", sys.argv[2]]
app()
"""


def _launch(tmp_path, env: dict, reader_leaves: bool) -> tuple[str, str]:
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, MICRO, str(tmp_path / "runs")], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **env})
    if reader_leaves:  # `| head -1`
        first = proc.stdout.readline()
        proc.stdout.close()
        err = proc.communicate(timeout=120)[1]
        return first.decode(), err.decode()
    out, err = proc.communicate(timeout=120)
    return out.decode(), err.decode()


def test_a_launch_on_an_ascii_console_prints_its_progress_in_ascii(tmp_path):
    """PYTHONIOENCODING=ascii: every launch died at its first progress line
    (UnicodeEncodeError on ' · ', exit 130)."""
    out, err = _launch(tmp_path, {"PYTHONIOENCODING": "ascii"}, reader_leaves=False)
    assert "the sweep ran to its end" in err and "Error" not in err, err[-2000:]
    assert f"started {A} - 0/2 finished, 1 running, 1 pending - 0/8,192 samples (0%)" in out, out[:500]
    out.encode("ascii")


def test_a_launch_whose_reader_leaves_runs_on(tmp_path):
    """`launch | head -2`: the sweep died with BrokenPipeError at the next line, and
    printed no resume command. What follows is dropped; the sweep goes on."""
    first, err = _launch(tmp_path, {}, reader_leaves=True)
    assert first.startswith("[") and f"started {A}" in first
    assert "the sweep ran to its end" in err and "BrokenPipe" not in err and "Traceback" not in err, err[-2000:]


A = "transformer-cot-tiny-n5-lr3e-3-s0"


def test_the_console_masks_secrets_replaces_what_its_encoding_lacks_and_outlives_its_reader():
    ascii_out = io.TextIOWrapper(io.BytesIO(), encoding="ascii", errors="strict")
    console = Console(ascii_out)
    console.write("a · b ± c é -> http://alice:S3CRET@host/x\n")
    console.flush()
    assert ascii_out.buffer.getvalue() == b"a - b +/- c ? -> http://alice:***@host/x\n"
    with pytest.raises(TypeError):  # not a binary stream: click writes its text through it
        console.write(b"")
    assert not hasattr(console, "buffer") and console.errors == "replace"

    read, write = os.pipe()
    piped = Console(os.fdopen(write, "w"))
    os.close(read)  # the reader left
    piped.write("x" * 100_000)
    piped.flush()
    piped.write("more\n")  # dropped, and no error
    assert piped.closed_by_reader
    piped.stream.close()  # its descriptor is /dev/null's now: the last flush cannot fail


@pytest.mark.parametrize("columns", [60, 100])
def test_the_reports_console_is_wrapped_at_words_to_the_terminal_and_keeps_each_command_whole(tmp_path, columns):
    """Issue 79: the closing lines ran past a 60- or 100-column terminal, which cut
    them mid-word. Each line fits, wrapped at its words; a command in backticks wider
    than the terminal is never split (the terminal folds it, and it copies back as
    one line), nor is a path; a pipe gets the same words in whole lines."""
    import re
    import shutil

    run = shutil.copytree(ROOT / "tests/fixtures/stored_run/istree_micro", tmp_path / "istree_micro")
    argv = [sys.executable, "-m", "orchestrator.cli", "report", str(run)]
    shown = screen(in_a_terminal(argv, columns, cwd=ROOT))
    piped = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT).stdout
    assert " ".join(" ".join(shown).split()) == " ".join(piped.split())  # the same words, in order
    assert max(len(line) for line in piped.splitlines()) > columns  # there was something to wrap
    for line in shown:
        commands = re.findall(r"`[^`]*`", line)
        unbreakable = len(line.split()) == 1 or any(len(c) > columns - 4 for c in commands)  # a path, a command
        assert len(line) <= columns or unbreakable, (columns, line)
    commands = [c for c in re.findall(r"`[^`]*`", piped)]
    assert commands and all(c in "\n".join(shown) for c in commands)  # none split across lines


@pytest.mark.parametrize("columns", [60, 100])
def test_the_progress_block_fits_the_terminal(columns):
    from tests.orchestrator.test_progress import PTY_PROBE

    """Issue 79: the bar was 40 columns whatever the terminal, its words folded
    under it into a column of their own. It shrinks for them."""
    import re

    shown = screen(in_a_terminal([sys.executable, "-c", PTY_PROBE.format(root=str(ROOT))], columns, cwd=ROOT))
    assert shown[-1] == "after the view" and any("2/2 finished" in line for line in shown), shown
    assert max(len(line) for line in shown) <= columns, shown
    assert [line for line in shown if "8,192/8,192 samples (100%) · " in line and "samples/s" in line], shown
    assert not [line for line in shown if re.match(r"^\s{12,}\S", line)], shown  # no words hung under the bar


START_PROBE = """
import sys
from types import SimpleNamespace
sys.path.insert(0, {root!r})
from orchestrator import cluster
from orchestrator.cli import sweep
cluster.start_ray = lambda spec, **opts: (SimpleNamespace(dashboard_url="127.0.0.1:8265"),
                                          ["a note of the cluster's, long enough to run past a narrow terminal's width"])
cluster.ray_token_auth = lambda: True
cluster.trial_resources = lambda spec, attached: ({{}}, "no GPU in the cluster: trials run on CPU (1 CPU each)")
sweep._start_ray(dict(address=None, dashboard=True, temp_dir=None), spec=None)
"""


@pytest.mark.parametrize("columns", [60, 100])
def test_a_launchs_start_up_lines_are_wrapped_at_words_to_the_terminal(columns):
    """Issue 79: at 60 columns the terminal cut the dashboard's token line and the
    trials' resources mid-word (`get-auth-token` / "(1 CPU each" / ")."). Ray's start
    stubbed out; the lines as a launch prints them, to stderr."""
    shown = screen(in_a_terminal([sys.executable, "-c", START_PROBE.format(root=str(ROOT))], columns, cwd=ROOT))
    words = " ".join(" ".join(shown).split())
    assert "print it with `ray get-auth-token` (kept in" in words and "(1 CPU each)." in words, shown
    assert "a note of the cluster's, long enough" in words, shown
    assert max(len(line) for line in shown) <= columns, shown
