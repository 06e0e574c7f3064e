"""``python recipes/linear_regression.py [options]`` is
``towerflow train linear_regression [options]``, e.g.

    python recipes/linear_regression.py --steps 20000

The recipe itself is towerflow/recipes/linear_regression.py, so the installed
``towerflow`` command finds it too.
"""

import sys

from towerflow import cli

if __name__ == "__main__":
    sys.exit(cli.main(["train", "linear_regression", *sys.argv[1:]]))
