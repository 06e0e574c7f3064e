#!/usr/bin/env bash
# Everything issue 6 must show on a GPU, in one run (for the lent GPU machine,
# whose python3 already has CuPy, NCCL, PyTorch and pytest):
#
#   bash benchmarks/gpu_check.sh [tests|peers|cifar10|all] [OUT_DIR]
#
# OUT_DIR defaults to $OUT or ./gpu_check. The groups (each fits in one
# 10-minute device call):
#   tests:   the op suites on /gpu:0 (marker gpu), the GPU backend's tests
#            (seed programs P1-P4, P6, P7, capture, towers on four logical
#            GPUs, fused kernels, NCCL), then the whole suite;
#   peers:   benchmarks/gpu_peers.py, float32 then mixed_float16;
#   cifar10: the cifar10 recipe on one GPU with the shared data: $TOWERFLOW_DATA,
#            else ./.gpu_data, else ../shared/data. NOTE: ../shared does not
#            travel to the device machine: copy it into the ignored .gpu_data
#            first (cp -r ../shared/data .gpu_data) and name .gpu_data in the
#            device call's carry.
# Each step's output goes to OUT_DIR/<step>.log; a failed step does not stop
# the later ones, and the exit status is the number of failed steps.
set -uo pipefail
cd "$(dirname "$0")/.."
group="${1:-all}"
out="${2:-${OUT:-gpu_check}}"
mkdir -p "$out"
failed=0

step() {
    local name=$1; shift
    echo "== $name: $*"
    local start=$SECONDS
    "$@" >"$out/$name.log" 2>&1
    local status=$?
    echo "   exit $status after $((SECONDS - start)) s (log: $out/$name.log)"
    tail -n 4 "$out/$name.log" | sed 's/^/   | /'
    [ "$status" -eq 0 ] || failed=$((failed + 1))
}

python3 -m pip install --quiet --no-deps -e . >"$out/install.log" 2>&1 || \
    echo "pip install -e . failed (see $out/install.log); using the tree as it is"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/gpu.txt" 2>&1
python3 -m towerflow devices --json >"$out/devices.json" 2>&1

if [ "$group" = tests ] || [ "$group" = all ]; then
    step op_suites_gpu python3 -m pytest -q -m gpu -rs tests
    step gpu_backend python3 -m pytest -q -rs tests/test_gpu_backend.py \
        tests/test_seed_training.py tests/test_plan_capture.py tests/test_gpu_faults.py \
        tests/test_cupy_conformance.py
    step full_suite python3 -m pytest -q -rs tests
fi
if [ "$group" = peers ] || [ "$group" = all ]; then
    step gpu_peers_float32 python3 benchmarks/gpu_peers.py --json "$out/gpu_peers_float32.json"
    step gpu_peers_mixed python3 benchmarks/gpu_peers.py --precision mixed_float16 --skip-p6 \
        --json "$out/gpu_peers_mixed_float16.json"
fi
data=${TOWERFLOW_DATA:-}
[ -n "$data" ] || { [ -d .gpu_data ] && data=.gpu_data; } || data=../shared/data
if [ "$group" != cifar10 ] && [ "$group" != all ]; then
    :
elif [ -f "$data/make_cifar10.py" ]; then
    step cifar10_data python3 "$data/make_cifar10.py" "$out/cifar10" --format both
    step cifar10_train python3 -m towerflow train cifar10 --data-dir "$out/cifar10" \
        --towers 1 --epochs 10 --batch-size 512 --json-out "$out/cifar10.json"
else
    echo "== cifar10 skipped: $data/make_cifar10.py not found"
fi
echo "failed steps: $failed"
exit "$failed"
