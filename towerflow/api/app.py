"""``tf.app``: ``tf.app.run`` and ``tf.app.flags``, over absl as in TensorFlow 1.15::

    FLAGS = tf.app.flags.FLAGS
    tf.app.flags.DEFINE_integer('steps', 100, 'Training steps.')

    def main(argv):
        print(FLAGS.steps, argv)        # argv: the arguments left after the flags

    if __name__ == '__main__':
        tf.app.run()                    # calls this module's main(argv)
"""

import sys as _sys

from absl import app as _absl_app

from . import flags


def _parse_flags_tolerate_undef(argv):
    """Parse the known flags; unknown ``--flags`` stay in argv for ``main``
    (TF 1.15's parser; absl's own would exit on them)."""
    return flags.FLAGS(_sys.argv if argv is None else argv, known_only=True)


def run(main=None, argv=None):
    """Parse the flags in ``argv`` (default ``sys.argv``), then exit with
    ``main(remaining_argv)``; ``main`` defaults to ``__main__``'s ``main``.

    Example: ``if __name__ == '__main__': tf.app.run()``. As absl, it prints
    the usage and exits with status 1 for a flag value that does not parse.
    """
    main = main or _sys.modules["__main__"].main
    _absl_app.run(main=main, argv=argv, flags_parser=_parse_flags_tolerate_undef)


__all__ = ["flags", "run"]

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.app")
