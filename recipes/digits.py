"""``python recipes/digits.py [options]`` is ``towerflow train digits [options]``.

The recipe itself (data, model, optimizer) is towerflow/recipes/digits.py, so the
installed ``towerflow`` command finds it too.
"""

import sys

from towerflow import cli

if __name__ == "__main__":
    sys.exit(cli.main(["train", "digits", *sys.argv[1:]]))
