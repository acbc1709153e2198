#!/usr/bin/env bash
# The device check of trial arrays (issue 50), in one call of at most 8 minutes on a fresh
# GPU machine. Here first: ../shared/gpu/prepare.sh (writes .gpu/). Then one device call:
#   carry: [".gpu"]   command: bash bench/gpu_check.sh   timeout_s: 600
# It installs the project and builds mamba-ssm (.gpu/device-env.sh: about 3-4 minutes), then:
#   1. pytest -m gpu: our scans against mamba-ssm's and fla's kernels, the fused Mamba scan
#      of an array against its members each in turn;
#   2. bench/profile_step.py: one step per architecture at retrieval n=16 and n=64 (0.5M):
#      GPU idle share, top kernels, syncs per step, the data path's share;
#   3. bench/bench_arrays.py: samples/s of arrays of K = 1, 4, 8, 16 members against K
#      separate trials, side by side, per architecture at n=16 and n=64 (0.5M);
#   4. a real `icr-sweep launch` of a slice of istree_grid.yaml in arrays (retrieval n=16,
#      0.5M, the three archs, four seeds: three arrays of four, resources.fuse 4), its wall
#      time and every member's state (status) in $OUT/launch_arrays.log.
# Every figure lands in $OUT/bench/results/ (the device named in each file's name and
# "device" field): copy them into bench/results/ here. Each step's log is in $OUT too;
# one that fails does not stop the next.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT/bench/results"
started=$SECONDS
source .gpu/device-env.sh > "$OUT/setup.log" 2>&1 || { echo "set-up failed"; tail -20 "$OUT/setup.log"; exit 1; }
echo "set-up: $((SECONDS - started)) s"; grep -i "failed" "$OUT/setup.log"
device=$(python3 -c "import torch; print(torch.cuda.get_device_name().replace(' ', '_'))")
echo "device: $device"

step() {  # name, seconds allowed, command...
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    echo "$name: exit $? in $((SECONDS - t0)) s"; tail -3 "$OUT/$name.log"
}

step gpu_tests 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/workloads
step profile 90 python3 bench/profile_step.py --steps 3 --out "$OUT/bench/results/profile_$device.json"
step arrays 200 python3 bench/bench_arrays.py --n 16 64 --k 1 4 8 16 --min-seconds 2 \
    --out "$OUT/bench/results/arrays_$device.json"
python3 - "$OUT/slice.yaml" <<'PY'
import sys, yaml
spec = yaml.safe_load(open("sweeps/istree_grid.yaml"))
spec.update(name="arrays_slice", axes=dict(archs=["transformer", "mamba", "hybrid"], setups=["retrieval"],
                                           sizes=["0.5M"], n=[16], seeds=[0, 1, 2, 3]))
spec["training"] = {**spec.get("training", {}), "samples": 16384, "eval_every": 8192}
spec["resources"] = {**spec.get("resources", {}), "fuse": 4, "gpus_per_trial": 1.0}
yaml.safe_dump(spec, open(sys.argv[1], "w"))
PY
step launch_arrays 120 bash -c 'python3 -m orchestrator.cli launch "$1" --storage "$2" &&
    python3 -m orchestrator.cli status "$2/arrays_slice"' _ "$OUT/slice.yaml" "$OUT/runs"
echo "total: $((SECONDS - started)) s"
