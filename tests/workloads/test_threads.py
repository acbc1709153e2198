"""The trial's thread pools are bounded whether or not numba was imported first."""

import subprocess
import sys

COMPILE_AFTER_BOUND = """
import numba  # imported before the bound, as `icr-sweep train`'s imports do
from workloads.threads import bound_threads
bound_threads(1)
@numba.njit
def plus_one(x):
    return x + 1
import os
print(plus_one(1), numba.get_num_threads(), os.environ["NUMBA_NUM_THREADS"])
"""


def test_a_kernel_compiled_after_the_bound_compiles_and_runs_on_the_bound():
    # `icr-sweep train --setup retrieval` crashed at its final evaluation, where the retriever's
    # kernel compiles: numba re-read NUMBA_NUM_THREADS, changed after its pool had started.
    done = subprocess.run([sys.executable, "-c", COMPILE_AFTER_BOUND], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["2", "1", "1"]  # the pool and the variable (for pools started later) at 1
