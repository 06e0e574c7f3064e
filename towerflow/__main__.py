"""``python -m towerflow ...`` is the ``towerflow`` command."""

import sys

from .cli import main

sys.exit(main())
