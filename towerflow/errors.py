"""Errors raised by towerflow, named and shaped like TensorFlow 1.x's.

Every runtime error is a subclass of :class:`OpError`, so ``except
tf.errors.OpError`` catches them all::

    try:
        sess.run(c)
    except tf.errors.InvalidArgumentError as err:
        print(err.op.name, err.message)
"""

OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
ABORTED = 10
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
DATA_LOSS = 15


class OpError(Exception):
    """A failure while running (or preparing to run) graph operations.

    ``node_def`` is kept for TensorFlow compatibility and is usually None;
    ``op`` is the :class:`Operation` involved, when one is known.
    """

    error_code = UNKNOWN

    def __init__(self, node_def, op, message, error_code=None):
        super().__init__(message)
        self.node_def = node_def
        self.op = op
        self.message = message
        if error_code is not None:
            self.error_code = error_code

    def __str__(self):
        return self.message


class CancelledError(OpError):
    error_code = CANCELLED


class UnknownError(OpError):
    error_code = UNKNOWN


# NOTE: InvalidArgumentError is also a ValueError, so code written against
# TensorFlow's ValueError for bad feeds keeps working.
class InvalidArgumentError(OpError, ValueError):
    error_code = INVALID_ARGUMENT


class DeadlineExceededError(OpError):
    error_code = DEADLINE_EXCEEDED


class NotFoundError(OpError):
    error_code = NOT_FOUND


class AlreadyExistsError(OpError):
    error_code = ALREADY_EXISTS


class PermissionDeniedError(OpError):
    error_code = PERMISSION_DENIED


class ResourceExhaustedError(OpError):
    error_code = RESOURCE_EXHAUSTED


class FailedPreconditionError(OpError):
    error_code = FAILED_PRECONDITION


class AbortedError(OpError):
    error_code = ABORTED


class OutOfRangeError(OpError):
    error_code = OUT_OF_RANGE


class UnimplementedError(OpError):
    error_code = UNIMPLEMENTED


class InternalError(OpError):
    error_code = INTERNAL


class UnavailableError(OpError):
    error_code = UNAVAILABLE


class DataLossError(OpError):
    """Unrecoverable data loss or corruption (a truncated or corrupt checkpoint)."""

    error_code = DATA_LOSS

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from .api import missing as _missing

__getattr__ = _missing.module_getattr("tf.errors")
