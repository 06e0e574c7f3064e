#!/usr/bin/env bash
# The project's test command (the README's second set-up command, and CI's):
# a fresh virtual environment, towerflow installed with its test and cuda12
# extras (so "CuPy importable but no GPU" is exercised for real), then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e ".[test,cuda12]"
python -m pytest -q "$@"
