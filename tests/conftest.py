"""Fixtures shared by the test modules."""

import os

import pytest
import torch


def pytest_configure(config):
    """Under pytest-xdist (`-n K`), each worker takes its share of the cores for
    torch's, OpenMP's and numba's pools (workloads.threads, as a trial does): K
    workers at torch's default (every core each) spun against each other, and
    `-m "not slow" -n 2` took 10+ minutes of two cores against 5 in one process
    (issue 63)."""
    from workloads.threads import bound_threads

    # The suite's launches start Ray without its dashboard, which costs each launch
    # core-seconds (bench/results/launch_cpu.json); the tests of the dashboard ask for it.
    os.environ.setdefault("ICR_SWEEP_DASHBOARD", "0")

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and os.environ.get("PYTEST_XDIST_WORKER"):
        bound_threads(max(1, (os.cpu_count() or 1) // workers))


def pytest_collection_modifyitems(items):
    """The `slow` tests (end-to-end sweeps of 15-130 s) first, each file's in its
    order: pytest-xdist hands each worker a block of the list and a worker that runs
    out takes from the end of the other's, so the suite ends on short tests. In
    file order it ended on a 34 s sweep while the other worker had been idle for 58 s
    (issue 63)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _float32_matmul_kept():
    """A trial on CUDA turns TF32 on for the process (`precision: fp32`,
    workloads/train.py); a test that builds one must not leave it on for the next,
    whose kernels are compared in plain fp32: TF32's rounding (about 1e-3) is above
    those tests' tolerances. (The likely cause of two fused-scan tests failing on the
    H200 of 2026-11-28 right after the first such test; they passed alone on an H100.)"""
    kept = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = kept


@pytest.fixture
def thread_pools():
    """Restores the process's thread pools after a test that runs `train` in-process
    (its --cpus, or a trial's bound, sets torch's and numba's pools and the thread
    variables: left so, later tests would run at one thread)."""
    import numba

    from workloads.threads import THREAD_VARS

    saved = torch.get_num_threads(), numba.get_num_threads(), {v: os.environ.get(v) for v in THREAD_VARS}
    yield
    torch.set_num_threads(saved[0])
    numba.set_num_threads(saved[1])
    for var, value in saved[2].items():
        os.environ.pop(var, None) if value is None else os.environ.__setitem__(var, value)


# What a working server answers: MLflow's health check, W&B's viewer of a known key.
WORKING = {b"/health": b"OK", b"/graphql": b'{"data": {"viewer": {"id": "VXNlcjox"}}}'}


def _serve_then_fall_silent(server, answers: int) -> None:
    """Answers the first `answers` HTTP requests with 200, as a working MLflow or W&B
    server would (WORKING, by path; `{}` elsewhere); every later connection is
    accepted and never answered (held open)."""
    held = []
    while True:
        try:
            conn, _ = server.accept()
        except OSError:  # closed: the test is over
            return
        if answers > 0:
            answers -= 1
            request = conn.recv(65536)
            path = request.split(b" ")[1].split(b"?")[0] if request.count(b" ") >= 2 else b"/"
            body = WORKING.get(path, b"{}")
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n%s" % (len(body), body))
            conn.close()
        else:
            held.append(conn)


@pytest.fixture
def silent_server():
    """A server on 127.0.0.1 that accepts connections and never answers, as a host
    behind a broken proxy or a hung service does: `silent_server(answers=k)` makes
    one that answers its first k requests first. Returns the base URL."""
    import socket
    import threading

    servers = []

    def make(answers: int = 0) -> str:
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        servers.append(server)
        threading.Thread(target=_serve_then_fall_silent, args=(server, answers), daemon=True).start()
        return f"http://127.0.0.1:{server.getsockname()[1]}"

    yield make
    for server in servers:
        server.close()
