"""The CPU time of scripts/setup-env on a fresh clone (a new venv, every package
installed, bytecode compiled) with uv and with pip, alternating, each with no
installer cache (as on a fresh machine), every process counted (bench/suite_cpu.py).

    python3 bench/setup_cpu.py [--reps 2]

Writes bench/results/setup_cpu.json: each run's core-seconds and wall seconds, the
medians, and the installed versions' equality (`pip freeze` of each venv).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from suite_cpu import measure  # noqa: E402

ROOT = Path(__file__).parents[1]
INSTALLERS = ("uv", "pip")


def _freeze(venv: Path) -> list[str]:
    """The venv's distributions as name==version, names normalised (uv and pip spell them apart)."""
    out = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    skip = {"icr-sweep", "pip", "setuptools", "uv", "wheel"}
    names = ((d["name"].lower().replace("_", "-"), d["version"]) for d in json.loads(out))
    return sorted(f"{name}=={version}" for name, version in names if name not in skip)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "setup_cpu.json")
    args = parser.parse_args()
    rows, installed = [], {}
    for rep in range(args.reps):
        for installer in INSTALLERS:
            with tempfile.TemporaryDirectory(prefix="icr-setup-") as work:
                clone, cache = Path(work) / "clone", Path(work) / "cache"
                subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
                env = {"ICR_INSTALLER": installer, "UV_CACHE_DIR": str(cache / "uv"), "PIP_CACHE_DIR": str(cache / "pip")}
                record = measure(["bash", "-c", f"source {clone}/scripts/setup-env"], env={**os.environ, **env})
                if record["exit_status"] != 0:
                    print(f"setup with {installer} failed (exit {record['exit_status']})", file=sys.stderr)
                    return 1
                installed[installer] = _freeze(clone / ".venv")
                shutil.rmtree(cache, ignore_errors=True)
            rows.append({"rep": rep, "installer": installer, "cpu_s": record["cpu_s"], "wall_s": record["wall_s"],
                         "counted_by": record["counted_by"]})
            print(rows[-1], file=sys.stderr)
    median = {i: round(statistics.median(r["cpu_s"] for r in rows if r["installer"] == i), 1) for i in INSTALLERS}
    summary = {"what": "scripts/setup-env on a fresh clone, no installer cache", "device": "cpu (2 cores)",
               "median_cpu_s": median, "saved_cpu_s": round(median["pip"] - median["uv"], 1),
               "same_versions": installed["uv"] == installed["pip"],
               "differing": sorted(set(installed["uv"]) ^ set(installed["pip"])), "rows": rows}
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1))
    return 0 if summary["same_versions"] else 1


if __name__ == "__main__":
    sys.exit(main())
