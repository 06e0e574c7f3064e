"""``tf.logging`` (and ``tf.compat.v1.logging``): TF1's logging functions over
towerflow's logger (:mod:`towerflow.log`)::

    tf.logging.set_verbosity(tf.logging.INFO)
    tf.logging.info('step %d: loss %.3f', step, loss)    # INFO:towerflow:step 3: ...

As in TensorFlow 1.15, messages below WARN are dropped until
``set_verbosity`` lowers the threshold. The records go to a child of the
``towerflow`` logger, so the threshold leaves towerflow's own messages (the
placement log) alone.
"""

import logging as _logging

from ..log import CurrentStderrHandler as _CurrentStderrHandler
from ..log import logger as _towerflow_logger

DEBUG = _logging.DEBUG
INFO = _logging.INFO
WARN = _logging.WARNING
ERROR = _logging.ERROR
FATAL = _logging.FATAL

_logger = _towerflow_logger.getChild("tf1")
if not _logger.handlers:
    _handler = _CurrentStderrHandler()
    # TF prints "INFO:tensorflow:message"; the name here says who wrote it.
    _handler.setFormatter(_logging.Formatter("%(levelname)s:towerflow:%(message)s"))
    _logger.addHandler(_handler)
    _logger.propagate = False
    _logger.setLevel(WARN)   # TensorFlow 1.15's default threshold


def set_verbosity(verbosity):
    """Log messages at ``verbosity`` and above: ``tf.logging.set_verbosity(tf.logging.INFO)``."""
    _logger.setLevel(verbosity)


def get_verbosity():
    """The current threshold: ``tf.logging.get_verbosity() == tf.logging.WARN`` at start."""
    return _logger.getEffectiveLevel()


def log(level, msg, *args, **kwargs):
    """``tf.logging.log(tf.logging.INFO, 'x=%d', 3)``."""
    _logger.log(level, msg, *args, **kwargs)


def debug(msg, *args, **kwargs):
    """``tf.logging.debug('shape %s', shape)``."""
    _logger.debug(msg, *args, **kwargs)


def info(msg, *args, **kwargs):
    """``tf.logging.info('step %d', step)``."""
    _logger.info(msg, *args, **kwargs)


def warning(msg, *args, **kwargs):
    """``tf.logging.warning('no checkpoint in %s', logdir)``."""
    _logger.warning(msg, *args, **kwargs)


warn = warning


def error(msg, *args, **kwargs):
    """``tf.logging.error('bad value %r', value)``."""
    _logger.error(msg, *args, **kwargs)


def fatal(msg, *args, **kwargs):
    """Log at FATAL (TensorFlow's ``fatal`` logs; it does not exit either)."""
    _logger.critical(msg, *args, **kwargs)


def vlog(level, msg, *args, **kwargs):
    """``tf.logging.vlog(1, msg)``: as TF 1.15, the same as ``log(level, msg)``."""
    _logger.log(level, msg, *args, **kwargs)


def flush():
    """Flush the handlers (records are written at once; kept for TF programs)."""
    for handler in _logger.handlers:
        handler.flush()


_counts = {}


def _count(token):
    _counts[token] = _counts.get(token, 0) + 1
    return _counts[token]


def log_every_n(level, msg, n, *args):
    """Log ``msg % args`` the 1st, (n+1)th, (2n+1)th ... time this line runs."""
    count = _count(_caller_token())
    log_if(level, msg, n > 0 and (count - 1) % n == 0, *args)


def log_first_n(level, msg, n, *args):
    """Log ``msg % args`` only the first ``n`` times this line runs."""
    count = _count(_caller_token())
    log_if(level, msg, count <= n, *args)


def log_if(level, msg, condition, *args):
    """Log ``msg % args`` at ``level`` only if ``condition`` holds."""
    if condition:
        _logger.log(level, msg, *args)


def _caller_token():
    """(file, line) of the user's call, so each call site counts on its own."""
    import sys
    frame = sys._getframe(2)
    return frame.f_code.co_filename, frame.f_lineno


def TaskLevelStatusMessage(msg):
    """Log ``msg`` at ERROR, as TensorFlow 1.15 does."""
    _logger.error(msg)

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.logging")
