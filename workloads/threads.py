"""One rule for a trial's thread pools, in a sweep and in `icr-sweep train`: torch's,
OpenMP's and numba's pools get as many threads as the trial has CPUs. Unbounded,
they spin against each other and against other jobs on a shared machine."""

import os

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def thread_env(n: int) -> dict[str, str]:
    """The environment that bounds pools not started yet (e.g. Ray workers')."""
    return {var: str(n) for var in THREAD_VARS}


def bound_threads(n: int) -> None:
    """Caps this process's pools at n threads. The environment sizes the pools not
    started yet (numba's too where it was imported first: its config is read again);
    numba re-reads the variable at each compile and refuses a new size once its pool
    runs, so there the variable keeps that pool's size."""
    os.environ.update(thread_env(n))
    import numba
    import torch

    try:
        numba.config.reload_config()
    except RuntimeError:  # its pool already runs
        os.environ["NUMBA_NUM_THREADS"] = str(numba.config.NUMBA_NUM_THREADS)

    torch.set_num_threads(n)
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
