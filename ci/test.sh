#!/usr/bin/env bash
# The project's test command (the README's second set-up command, and CI's):
# a fresh virtual environment, towerflow installed with its test and cuda12
# extras (so "CuPy importable but no GPU" is exercised for real), then pytest.
# On a CPU with AVX-512 the compiled-kernel tests run a second time as an
# AVX2-only CPU runs them (TOWERFLOW_ISA=avx2: the compiled GEMM declines).
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e ".[test,cuda12]"
python -m pytest -q "$@"
if [ $# -eq 0 ] && grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
    echo "== the compiled-kernel tests again with TOWERFLOW_ISA=avx2 (as on an AVX2-only CPU)"
    TOWERFLOW_ISA=avx2 python -m pytest -q tests/test_dense_gemm.py tests/test_differential.py \
        tests/test_native_batch_norm.py tests/test_native_kernels.py tests/test_native_parts.py \
        tests/test_native_updates.py tests/test_winograd.py tests/test_winograd_5x5.py
fi
