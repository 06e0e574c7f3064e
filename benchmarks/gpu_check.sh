#!/usr/bin/env bash
# The device check: what a lent GPU machine (one command of at most 10
# minutes, 15 minutes of device time in all, no package index, at most 8
# files of 16 MiB back) must show, in one run of at most 8 minutes:
#
#   bash benchmarks/gpu_check.sh [--tiny] [OUT_DIR]
#
# OUT_DIR (default $OUT, else benchmarks/results/gpu_check) receives six
# files: summary.json (versions, each step's status, seconds and pytest
# counts, the measurements), check.log (every step's output, capped), and
# the JSON of the two gpu_peers runs and of the two cifar10 runs. Logs and
# data go to a temporary folder, removed at the end. Steps, each under a
# timeout clipped to the budget (GPU_CHECK_BUDGET_S, default 450 s; a step
# that no longer fits is skipped):
#   install (in the background): pip install --no-build-isolation --no-deps -e .,
#            else the tree on PYTHONPATH (summary.json says which);
#   versions, cifar10_data (make_cifar10.py from the shared data: $TOWERFLOW_DATA,
#            else ./.gpu_data, else ../shared/data; else a synthetic set);
#   gpu_peers (the recipe's network against PyTorch eager, host µs a step
#            with and without CUDA graphs, P6), cifar10_one_gpu,
#            cifar10_two_logical_gpus (GPU 0 split in two), gpu_peers_implicit_gemm
#            (the network's throughput with TOWERFLOW_GPU_CONV=implicit);
#   gpu_backend_tests (tests/test_gpu_*.py and the capture, seed-program,
#            CuPy-conformance and cross-stream capture files) and gpu_op_tests
#            (pytest -m gpu, the rest, in 4 shards: benchmarks/gpu_check_shard.py),
#            all 5 at once after the benchmarks, interrupted with SIGINT at
#            their limit (pytest still counts).
# --tiny shrinks every step (CI runs it on the simulated GPU: tests/test_device_check.py).
# PYTHON names the interpreter (default python3). The exit status is the
# number of failed steps (100 if no summary could be written).
set -uo pipefail
# NOTE: EPOCHREALTIME (bash 5) times the steps: refuse older shells plainly.
((BASH_VERSINFO[0] >= 5)) || { echo "gpu_check.sh needs bash 5 or later"; exit 100; }
size=full
[ "${1:-}" = --tiny ] && { size=tiny; shift; }
out=${1:-${OUT:-$(dirname "$0")/results/gpu_check}}
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 100
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
budget=${GPU_CHECK_BUDGET_S:-$([ "$size" = tiny ] && echo 110 || echo 450)}
reserve=25          # a step's kill grace (10 s) and the summary (15 s)
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX") || exit 100
trap 'rm -rf "$work"' EXIT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export GPU_CHECK_RUNNING=1    # tests/test_device_check.py skips itself inside a check
echo "$EPOCHREALTIME" >"$work/started"
: >"$work/steps.tsv"

step() {    # step NAME SECONDS COMMAND...: COMMAND's output to NAME.log, its record to steps.tsv
    local name=$1 limit=$2 start status
    shift 2
    ((limit > budget - reserve - SECONDS)) && limit=$((budget - reserve - SECONDS))
    if ((limit < 5)); then
        printf '%s\tskipped\t\t\t%s\n' "$name" "$limit" >>"$work/steps.tsv"
        echo "== $name: skipped (no time left)"; return
    fi
    start=$EPOCHREALTIME
    # SIGINT first: pytest then prints its counts, a benchmark its traceback.
    timeout -s INT -k 10 "$limit" "$@" >"$work/$name.log" 2>&1 </dev/null
    status=$?
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$start" "$EPOCHREALTIME" "$limit" \
        >>"$work/steps.tsv"
    echo "== $name: exit $status (${SECONDS} s into the check)"
}

data=${TOWERFLOW_DATA:-}
[ -n "$data" ] || { [ -d .gpu_data ] && data=.gpu_data; } || data=../shared/data
data=$(cd "$data" 2>/dev/null && pwd || echo "$data")
mnist=$([ -d "$data/mnist-small" ] && echo "$data/mnist-small")     # for P6, in gpu_peers
backend_tests=(tests/test_gpu_*.py tests/test_seed_training.py tests/test_plan_capture.py
               tests/test_cupy_conformance.py tests/test_simgpu_fork_join.py)
pytest=(env -u TOWERFLOW_SIMULATED_GPUS PYTHONPATH="$PWD/benchmarks:$PYTHONPATH"
        "$py" -m pytest -q -p no:cacheprovider --tb=short -rfE)
shards=4            # processes for the op tests, at once on the GPU: compiling bounds them
if [ "$size" = tiny ]; then
    shards=2
    peers=(--batch 1 --host-batch 1 --rounds 1 --steps 1 --skip-p6)
    train=(--test-images 64 cifar10 --steps 2 --batch-size 16)
    # (-k matches module names too: fork_join is all of test_simgpu_fork_join.py)
    backend_tests=(tests/test_gpu_backend.py tests/test_simgpu_fork_join.py
                   -k "p1_ops or single_rank_nccl or fork_join")
    op_tests=(-m gpu tests/test_ops.py -k "matmul and gpu0")
else
    peers=(--rounds 3)
    [ -n "$mnist" ] || peers+=(--skip-p6)
    train=(cifar10 --steps 100 --batch-size 512)
    op_tests=(-m gpu tests "${backend_tests[@]/#/--ignore=}")
fi
train+=(--data-dir "$work/cifar10" --quiet)

step install 240 "$py" benchmarks/gpu_check_steps.py install "$size" "$work/install.json" &
install_pid=$!
step versions 60 "$py" benchmarks/gpu_check_summary.py versions "$work/versions.json"
step cifar10_data 60 "$py" benchmarks/gpu_check_steps.py cifar10-data "$work/cifar10" \
    "$work/data.json" "$size" "$data"
step gpu_peers 150 env TOWERFLOW_MNIST_DIR="$mnist" "$py" benchmarks/gpu_peers.py "${peers[@]}" \
    --json "$work/gpu_peers.json"
step cifar10_one_gpu 90 "$py" benchmarks/gpu_check_steps.py train "${train[@]}" --towers 1 \
    --json-out "$work/cifar10_one_gpu.json"
step cifar10_two_logical_gpus 90 "$py" benchmarks/gpu_check_steps.py train --logical-gpus 2 \
    "${train[@]}" --towers 2 --json-out "$work/cifar10_two_logical_gpus.json"
step gpu_peers_implicit_gemm 100 env TOWERFLOW_GPU_CONV=implicit "$py" benchmarks/gpu_peers.py \
    "${peers[@]}" --tables throughput --json "$work/gpu_peers_implicit_gemm.json"
wait "$install_pid"           # the tests compare against the compiled CPU kernels
step gpu_backend_tests 300 "${pytest[@]}" "${backend_tests[@]}" &
for shard in $(seq "$shards"); do
    step "gpu_op_tests_$shard" 300 env GPU_CHECK_SHARD="$shard/$shards" "${pytest[@]}" \
        -p gpu_check_shard "${op_tests[@]}" &
done
wait
rm -f "$out/summary.json"
timeout -k 5 15 "$py" benchmarks/gpu_check_summary.py summary "$work" "$out" "$size" "$budget"
status=$?
[ -s "$out/summary.json" ] || { echo "no summary.json (exit $status)"; exit 100; }
exit "$status"
