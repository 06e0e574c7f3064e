"""towerflow's logger: INFO and above to the *current* ``sys.stderr``.

Like TensorFlow's, it has its own handler, so placement logs appear without
any ``logging`` set-up; ``tf.get_logger()`` returns it for users to adjust.
"""

import logging
import sys


class CurrentStderrHandler(logging.StreamHandler):
    # NOTE: looks sys.stderr up at each record, so redirections made after
    # import (pytest's capsys, contextlib.redirect_stderr) are honoured.
    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


logger = logging.getLogger("towerflow")
if not logger.handlers:
    _handler = CurrentStderrHandler()
    _handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(_handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def set_level(name):
    """The logger's level by name: 'debug', 'info', 'warning' or 'error'."""
    logger.setLevel(name.upper())


def level_from_environment():
    """Apply TOWERFLOW_LOG_LEVEL, if set to a level (a bad value is left to
    switches.check(), which names it when a Session or the CLI starts)."""
    from . import switches
    try:
        level = switches.log_level()
    except ValueError:
        return
    if level:
        set_level(level)


level_from_environment()


def get_logger():
    """The ``towerflow`` logger: ``tf.get_logger().setLevel('WARNING')``."""
    return logger
