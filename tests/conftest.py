"""Fixtures shared by the test modules."""

import os

import pytest
import torch

# scripts/test runs the suite on two pytest-xdist workers (`-n 2 --dist loadgroup`).
# The modules here start a local Ray (or drive a sweep through one): they run one
# after another on one worker, since two Ray instances on one machine would share
# its ports, /tmp/ray and its two cores' worth of trial slots. The other worker
# runs the rest (training, models, tasks, specs, reports) beside them.
RAY_MODULES = frozenset({
    "tests/orchestrator/test_autoscaling.py", "tests/orchestrator/test_cli_startup.py",
    "tests/orchestrator/test_cluster.py", "tests/orchestrator/test_dashboard_browser.py",
    "tests/orchestrator/test_preflight.py", "tests/orchestrator/test_rundir.py",
    "tests/orchestrator/test_s3.py", "tests/orchestrator/test_sweep_e2e.py",
    "tests/orchestrator/test_tracking.py", "tests/orchestrator/test_tune.py",
    "tests/bench/test_bench_throughput.py",
})


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups off the markers
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.split("::")[0] in RAY_MODULES:
            item.add_marker(pytest.mark.xdist_group("ray"))


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
