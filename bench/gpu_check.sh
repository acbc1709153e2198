#!/usr/bin/env bash
# The device check (issue 60) on a fresh GPU machine. Here first: scripts/gpu-prepare (writes
# .gpu/, mamba-ssm compiled here: the device's set-up took 9-14 s on 2026-11-28) and, to
# measure a change to the arrays side by side, `git show REV:workloads/arrays.py >
# .gpu/arrays_REV.py` (then AGAINST=.gpu/arrays_REV.py: the arrays bench's third side).
# Then, as 15 minutes of device time hold, two calls, the second at once after the first
# (a machine goes back 30 s after a call; a start took about 50 s on 2026-11-28):
#   carry: [".gpu"]   command: STEPS="static levers sweep mps" bash bench/gpu_check.sh   timeout_s: 470
#   carry: [".gpu"]   command: STEPS="tests path profile" bash bench/gpu_check.sh         timeout_s: 345
# The first is issue 77's (its levers on against off); the second, or a rerun of the first
# where it was cut. STEPS="arrays" measures the arrays again; SWEEP_SET="training.cuda_graphs=on
# ..." sets the levers that measured faster for the sweep steps, whose rates `icr-sweep plan`
# projects from.
# It installs the project from .gpu (scripts/gpu-env.sh: seconds, no build), then:
#   1. pytest -m gpu (our scans against mamba-ssm's and fla's kernels, Mamba-3's module, the
#      fused scans of arrays against their members each in turn, an array's step under torch's sync
#      debug mode), and beside it on the same GPU bench/gpu_path.py: a slice of
#      istree_grid.yaml (retrieval n=16, 0.5M, the three archs, four seeds) launched in
#      arrays of 4, stopped with SIGINT mid-run, resumed and reported, each member's
#      evaluations counted;
#   2. bench/profile_step.py: one step per architecture at retrieval n=16 and n=64 (0.5M),
#      a lone trial's and an array's of 8: GPU idle share, top kernels, syncs and kernels
#      per step, the data path's share (alone on the GPU);
#   3. bench/bench_arrays.py: samples/s of arrays of K = 1, 4, 8, 16 members against K
#      separate trials (and against the array of $AGAINST), side by side, per
#      architecture at n=16 and n=64 (alone on the GPU);
#   4. bench/bench_sweep.py: the 12-trial slice of istree_grid.yaml through the real launch
#      path for 90 s: rates per trial class, and the grids' projected wall time on this GPU;
#   5. (static) pytest -m gpu of the static step: captured against uncaptured, no host sync
#      in a replay, capturable Adam against the plain fused one;
#   6. (levers) bench/bench_levers.py, issue 77's levers on against off, side by side: a lone
#      step plain and captured as CUDA graphs (3 archs, retrieval n=16 and 64), the
#      Transformer's n=64 step with bf16 attention against fp32;
#   7. (mps) the slice of step 4 again with resources.mps: on (the launch's own MPS daemon):
#      compare its aggregate with step 4's.
# Figures land in $OUT/results/ (the device named in each file's name and "device" field):
# copy them into bench/results/ here. Every step's log is in $OUT/logs.tar.gz; a step
# that fails does not stop the next. STEPS="profile arrays" runs only those; ARRAYS narrows
# the arrays bench (its arguments).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-/tmp/gpu_check}
STEPS=${STEPS:-"tests path profile arrays sweep"}
# the hybrid first: the H200's run of 2026-11-28 was cut before its rows
ARRAYS=${ARRAYS:-"--archs hybrid transformer mamba --n 16 64 --k 1 4 8 16"}
AGAINST=${AGAINST:-}
mkdir -p "$OUT/results" /tmp/gpu_logs
started=$SECONDS
source scripts/gpu-env.sh > /tmp/gpu_logs/setup.log 2>&1 || { echo "set-up failed"; tail -20 /tmp/gpu_logs/setup.log; exit 1; }
echo "set-up: $((SECONDS - started)) s"; grep -i "failed\|took" /tmp/gpu_logs/setup.log
device=$(python3 -c "import torch; print(torch.cuda.get_device_name().replace(' ', '_'))")
echo "device: $device"
python3 -c "import mamba_ssm, fla, torch, triton; print('mamba_ssm', mamba_ssm.__version__, 'fla', fla.__version__, 'torch', torch.__version__, 'triton', triton.__version__)"

step() {  # name, seconds allowed, command...
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" > "/tmp/gpu_logs/$name.log" 2>&1
    echo "$name: exit $? in $((SECONDS - t0)) s"; tail -4 "/tmp/gpu_logs/$name.log"
}
wanted() { [[ " $STEPS " == *" $1 "* ]]; }

if wanted tests; then
    # mamba-ssm's in a pytest of their own first (the paper's Mamba and hybrid, the arrays' fused
    # scans), fla's after: Triton compiles fla's kernels on first use, minutes for some, and a
    # pytest cut by the step's limit prints no failure (so it was on the H200, 2026-11-28)
    step gpu_tests 200 bash -c 'python3 -m pytest -v -m gpu -p no:cacheprovider --timeout 100 --durations=0 \
        tests/workloads/models/test_models.py tests/workloads/test_arrays.py tests/workloads/models/test_mamba2.py \
        tests/workloads/test_static_step.py tests/workloads/models/test_mamba3.py -k "not gated_delta and not rwkv7 and not kda and not log_linear"; \
        python3 -m pytest -v -m gpu -p no:cacheprovider --timeout 100 \
        tests/workloads/test_arrays.py tests/workloads/models/test_gated_deltanet.py tests/workloads/models/test_rwkv7.py \
        tests/workloads/models/test_gated_deltaproduct.py tests/workloads/models/test_kda.py \
        tests/workloads/models/test_gated_deltanet2.py tests/workloads/models/test_log_linear_mamba2.py \
        -k "gated_delta or rwkv7 or fla or kda or log_linear"' &
fi
if wanted path; then
    step gpu_path 215 python3 bench/gpu_path.py --timeout 200 --samples 12288 --eval-every 4096 \
        --out "$OUT/results/gpu_path_$device.json"
fi
wait
wanted profile && step profile 110 python3 bench/profile_step.py --archs hybrid transformer mamba --steps 3 --array-k 8 \
    --out "$OUT/results/profile_$device.json"
# shellcheck disable=SC2086
wanted arrays && step arrays 180 python3 bench/bench_arrays.py $ARRAYS --min-seconds 1 \
    ${AGAINST:+--against "$AGAINST"} --out "$OUT/results/arrays_$device.json"
wanted static && step gpu_tests_static 60 python3 -m pytest -v -m gpu -p no:cacheprovider --timeout 50 \
    tests/workloads/test_static_step.py
if wanted levers; then
    step levers_graphs 90 python3 bench/bench_levers.py --lever graphs --device cuda --archs hybrid transformer mamba \
        --n 16 64 --steps 30 --out "$OUT/results/levers_graphs_$device.json"
    step levers_attention 40 python3 bench/bench_levers.py --lever attention --device cuda --archs transformer \
        --n 64 --steps 30 --out "$OUT/results/levers_attention_$device.json"
fi
sets=(); for s in ${SWEEP_SET:-}; do sets+=(--set "$s"); done
wanted sweep && step sweep 130 python3 bench/bench_sweep.py --device cuda --seconds 90 --eval-every 10000 \
    --set resources.mps=off "${sets[@]}" --out "$OUT/results/sweep_$device.json"
# The same slice as clients of the launch's own MPS daemon: on the H200 of 2026-11-28 eight
# lone trials at 1/8 GPU each trained 1,388 samples/s together, time-sliced, while a lone
# step leaves the GPU idle about 90% at n=16 (compare the two files' aggregates)
wanted mps && step sweep_mps 130 python3 bench/bench_sweep.py --device cuda --seconds 90 --eval-every 10000 \
    --set resources.mps=on "${sets[@]}" --out "$OUT/results/sweep_${device}_mps.json"
for run in /tmp/gpu_path-*; do cp "$run"/*.log /tmp/gpu_logs/ 2>/dev/null; done
tar czf "$OUT/logs.tar.gz" --exclude='checkpoint_*' --exclude='*.pt' -C /tmp gpu_logs $(cd /tmp && ls -d gpu_path-*/runs 2>/dev/null)
echo "total: $((SECONDS - started)) s"
