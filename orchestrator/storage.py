"""Run directories on remote storage (s3://, gs://, ...), through the filesystem
layer Ray Tune itself stores results with (pyarrow.fs), so whatever Tune can
write there, status, report and resume can read. Credentials and endpoints come
from the environment as for Tune (AWS_PROFILE, AWS_ENDPOINT_URL, ...).

Reading a remote run copies its small files (configs, results, experiment state,
the spec) into a local directory and reads that with the same code as a local
run; checkpoints stay where they are.
"""

import contextlib
import functools
import os
import tempfile
import threading
from pathlib import Path
from typing import Iterator, Optional

PROBE = ".icr-sweep-probe"


class RunDirError(RuntimeError):
    """A run directory that cannot be used; the message says why and what to do."""


def is_remote(location: str) -> bool:
    """Whether `location` names remote storage (file:// and plain paths are local)."""
    scheme, sep, _ = str(location).partition("://")
    return bool(sep) and scheme != "file"


# Seconds the first request to a remote store may take before the command gives up:
# without a network, gs:// retries for many minutes with no output.
ANSWER_TIMEOUT_S = 20.0
_answered: set[str] = set()


def answer_timeout() -> float:
    try:
        return float(os.environ.get("ICR_STORAGE_TIMEOUT_S", ANSWER_TIMEOUT_S))
    except ValueError:
        return ANSWER_TIMEOUT_S


def _fs(uri: str):
    """The filesystem and path of `uri`, once its store has answered a first request
    within ICR_STORAGE_TIMEOUT_S seconds (default 20); RunDirError otherwise."""
    import pyarrow.fs

    try:
        fs, path = pyarrow.fs.FileSystem.from_uri(uri)
    except (OSError, ValueError) as e:
        raise RunDirError(f"{uri}: cannot open this storage ({e})") from None
    fs = _bounded(fs)
    store = uri.split("://", 1)[0] + "://" + path.split("/", 1)[0]
    if store not in _answered:
        outcome: list = []
        probe = threading.Thread(target=lambda: outcome.append(_try(fs.get_file_info, path)), daemon=True)
        probe.start()
        probe.join(answer_timeout())
        if not outcome:
            raise RunDirError(f"{uri}: the storage did not answer within {answer_timeout():g} s (no network, or "
                              "credentials it waits for?); check the connection and the credentials, or use a local "
                              "path (ICR_STORAGE_TIMEOUT_S sets the wait)")
        if isinstance(outcome[0], Exception):
            raise RunDirError(f"{uri}: cannot be reached ({str(outcome[0]).splitlines()[0]})") from None
        _answered.add(store)
    return fs, path


def _bounded(fs):
    """`fs` with its requests bounded by the wait, where its kind allows (S3): a
    request to a store that accepts the connection and never answers otherwise
    holds the process at exit for minutes after the command gave up (pyarrow
    waits for it: 100 s for a 20 s wait), and so does each later request."""
    import pyarrow.fs

    if not isinstance(fs, pyarrow.fs.S3FileSystem):
        return fs
    options = fs.__reduce__()[1][0]  # the options from_uri resolved (region, endpoint, ...), as pickling keeps them
    half = answer_timeout() / 2  # two tries within the wait
    options.update(connect_timeout=half, request_timeout=half,
                   retry_strategy=pyarrow.fs.AwsStandardS3RetryStrategy(max_attempts=2))
    return pyarrow.fs.S3FileSystem(**options)


@functools.lru_cache(maxsize=16)
def bounded_filesystem(uri: str):
    """(filesystem, path) of remote `uri` for Ray Tune, every request of it bounded
    by the wait (ICR_STORAGE_TIMEOUT_S): Tune's own filesystem waits for ever on a
    store that accepts connections and stops answering (issue 52, class 5). Made
    once per URI: a probe every few seconds reuses it."""
    import pyarrow.fs

    try:
        fs, path = pyarrow.fs.FileSystem.from_uri(uri)
    except (OSError, ValueError) as e:
        raise RunDirError(f"{uri}: cannot open this storage ({e})") from None
    return _bounded(fs), path


def silent_for(uri: str) -> str:
    """Why remote `uri` does not answer now ('' where it does): one bounded request."""
    try:
        fs, path = bounded_filesystem(uri)
        fs.get_file_info(path)
        return ""
    except Exception as e:  # pyarrow's OSError, a store's own error: said, never raised
        return str(e).splitlines()[0] if str(e) else type(e).__name__


def _try(fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # handed to the caller's thread
        return e


def check_remote(run_dir: str, flag: str = "--storage") -> None:
    """Proves `run_dir` writable by writing and deleting a probe object, so that a
    missing bucket or credentials stop the launch before Ray starts."""
    fs, path = _fs(run_dir)
    probe = f"{path.rstrip('/')}/{PROBE}"
    try:
        with fs.open_output_stream(probe) as f:
            f.write(b"")
        fs.delete_file(probe)
    except OSError as e:
        raise RunDirError(f"{run_dir} cannot be written ({str(e).splitlines()[0]}); check the bucket, "
                          f"the credentials (AWS_PROFILE, an instance profile) or choose another {flag}") from None


def write_file(uri: str, data: bytes) -> None:
    fs, path = _fs(uri)
    with fs.open_output_stream(path) as f:
        f.write(data)


def read_file(uri: str) -> Optional[bytes]:
    """The file's bytes, or None where there is no such file."""
    import pyarrow.fs

    fs, path = _fs(uri)
    if fs.get_file_info(path).type != pyarrow.fs.FileType.File:
        return None
    with fs.open_input_stream(path) as f:
        return f.read()


def names_in(uri: str) -> list[str]:
    """The names of what the remote folder `uri` holds at its top."""
    import pyarrow.fs

    fs, root = _fs(uri)
    return [Path(item.path).name for item in fs.get_file_info(pyarrow.fs.FileSelector(root.rstrip("/")))]


def _is_checkpoint(relative: str) -> bool:
    return any(part.startswith("checkpoint_") for part in relative.split("/"))


def download_run(run_dir: str, local: Path) -> Path:
    """Copies every file of the remote `run_dir` but its checkpoints into `local`."""
    import pyarrow.fs

    fs, root = _fs(run_dir)
    root = root.rstrip("/")
    info = fs.get_file_info(root)
    if info.type == pyarrow.fs.FileType.NotFound:
        raise FileNotFoundError(f"{run_dir}: no such run directory")
    for item in fs.get_file_info(pyarrow.fs.FileSelector(root, recursive=True)):
        relative = item.path[len(root):].lstrip("/")
        if item.type != pyarrow.fs.FileType.File or _is_checkpoint(relative):
            continue
        target = local / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        with fs.open_input_stream(item.path) as src:
            target.write_bytes(src.read())
    return local


@contextlib.contextmanager
def local_view(run_dir: str) -> Iterator[Path]:
    """A local directory holding the run's files: the run directory itself when it
    is local, else a temporary copy of it (checkpoints left out)."""
    if not is_remote(run_dir):
        yield Path(run_dir.removeprefix("file://"))
        return
    with tempfile.TemporaryDirectory(prefix="icr-run-") as tmp:
        yield download_run(run_dir, Path(tmp) / run_dir.rstrip("/").rsplit("/", 1)[-1])


def upload(files: list[Path], run_dir: str) -> None:
    """Writes `files` into the remote `run_dir` under their own names."""
    for file in files:
        write_file(f"{run_dir.rstrip('/')}/{file.name}", file.read_bytes())
