"""``python recipes/text_sample.py [options]`` is
``towerflow train text_sample [options]``, e.g.

    python recipes/text_sample.py --seed 1

The recipe itself is towerflow/recipes/text_sample.py, so the installed
``towerflow`` command finds it too.
"""

import sys

from towerflow import cli

if __name__ == "__main__":
    sys.exit(cli.main(["train", "text_sample", *sys.argv[1:]]))
