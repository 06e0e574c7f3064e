"""``python recipes/mnist_softmax.py [options]`` is
``towerflow train mnist_softmax [options]``, e.g.

    python recipes/mnist_softmax.py --data-dir MNIST_data

The recipe itself is towerflow/recipes/mnist_softmax.py, so the installed
``towerflow`` command finds it too.
"""

import sys

from towerflow import cli

if __name__ == "__main__":
    sys.exit(cli.main(["train", "mnist_softmax", *sys.argv[1:]]))
