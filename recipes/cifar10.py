"""``python recipes/cifar10.py [options]`` is ``towerflow train cifar10 [options]``.

The recipe itself (data, model, optimizer) is towerflow/recipes/cifar10.py, so the
installed ``towerflow`` command finds it too.
"""

import sys

from towerflow import cli

if __name__ == "__main__":
    sys.exit(cli.main(["train", "cifar10", *sys.argv[1:]]))
