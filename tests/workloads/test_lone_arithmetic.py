"""A lone trial's arithmetic is fixed: a short trial of each paper architecture gives
the rows stored in tests/fixtures/lone_trial_rows.json (issue 61: a change that moves
a lone trial's arithmetic changes every published number, and must be seen).

The tolerance is what rounding across CPUs allows, measured: after these 40 steps the
rows of torch's and numba's AVX-512, AVX2 and generic code paths differ by at most
1.1e-7 relative (ATEN_CPU_CAPABILITY, NUMBA_CPU_NAME); the check allows 1e-5. A warm-up
one step longer moves them by 5.7e-3 to 2.1e-2 and fails it, as would any change to the
initialisation, the data, the schedule or the optimiser that moves a loss by more than
1e-5. A change at the level CPUs differ by passes (a peak rate 1e-6 larger moves them by
3.5e-7), and a long trial amplifies it (docs/laptop.md, "The same run on another machine,
or twice"): a stored run's rows are reproduced bit for bit on its own kind of machine only.

`python -m tests.workloads.test_lone_arithmetic` rewrites the file, for a change that
moves the arithmetic on purpose (say so in the commit, and re-run what README quotes).
"""

import json
import math
from pathlib import Path

STORED = Path(__file__).parents[1] / "fixtures" / "lone_trial_rows.json"
RTOL = 1e-5
COMPARED = ("train_loss", "val_loss", "val_token_accuracy")


def short_rows() -> dict:
    """Each paper architecture's evaluated rows after 320 and 640 samples of IsTree CoT n=4."""
    from workloads.config import trial_config
    from workloads.tasks.istree import IsTreeConfig
    from workloads.threads import bound_threads
    from workloads.train import Hooks, run_trial

    bound_threads(1)
    out = {}
    for arch in ("transformer", "mamba", "hybrid"):
        rows = []
        config = trial_config(arch, "tiny", IsTreeConfig(n=4, setup="cot"), lr=3e-3, samples=640, batch_size=16,
                              warmup_samples=320, eval_every=320, val_samples=100, seed=0, checkpoint_every_s=1e9)
        run_trial(config, Hooks(report=lambda metrics, _: rows.append(metrics)))
        out[arch] = [{k: r[k] for k in ("samples", *COMPARED)} for r in rows if r.get("evaluated")]
    return out


def test_a_short_lone_trial_gives_the_stored_rows(thread_pools):
    stored, got = json.loads(STORED.read_text()), short_rows()
    assert got.keys() == stored.keys()
    for arch, rows in stored.items():
        assert [r["samples"] for r in got[arch]] == [r["samples"] for r in rows], arch
        for want, have in zip(rows, got[arch]):
            for key in COMPARED:
                assert math.isclose(have[key], want[key], rel_tol=RTOL), (arch, want["samples"], key, have[key], want[key])


if __name__ == "__main__":
    STORED.write_text(json.dumps(short_rows(), indent=1) + "\n")
    print(f"wrote {STORED}")
