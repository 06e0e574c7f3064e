#!/usr/bin/env bash
# The project's test command (the README's second set-up command, and CI's):
# a fresh virtual environment, towerflow installed with its test, cuda12 and docs
# extras (cuda12: so "CuPy importable but no GPU" is exercised for real), then
# pytest, then the docs site built with warnings as errors.
# Then the compiled-kernel tests and the differential suite run again on every
# other path this CPU can execute (TOWERFLOW_ISA: on an AVX-512 CPU the AVX2
# GEMMs, as an AVX2-only CPU runs them; everywhere the NumPy kernels alone).
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e ".[test,cuda12,docs]"
python -m pytest -q "$@"
if [ $# -eq 0 ]; then
    # The docs site, every warning an error (its code blocks ran in pytest: tests/test_docs.py).
    echo "== the docs site: mkdocs build --strict"
    NO_MKDOCS_2_WARNING=1 python -m mkdocs build --strict --quiet --site-dir "$(mktemp -d)"
    paths=$(python -c "from towerflow.backends import native
print(' '.join(native.GEMM_PATHS[1:]), 'generic')")
    for path in $paths; do
        echo "== the compiled-kernel tests and the differential suite with TOWERFLOW_ISA=$path"
        TOWERFLOW_ISA=$path python -m pytest -q tests/test_dense_gemm.py \
            tests/test_differential.py tests/test_native_batch_norm.py \
            tests/test_native_kernels.py tests/test_native_parts.py \
            tests/test_native_updates.py tests/test_winograd.py tests/test_winograd_5x5.py
    done
fi
