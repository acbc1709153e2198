"""Fixtures shared by the test modules."""

import os

import pytest
import torch


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
