"""The op fuzzer's machinery (tests/test_op_fuzz.py): random inputs, one case
run in a Session under a time limit, and the verdict on its outcome.

A case passes when either
- the NumPy reference gives a value and towerflow gives the same value, with
  the output tensor's declared dtype and the reference's shape; or
- the reference rejects the input (it raises: TensorFlow would refuse it) and
  towerflow raises a ``tf.errors.OpError`` naming the op at ``Session.run``,
  or ``ValueError``/``TypeError`` while building the graph (TensorFlow's
  shape inference and dtype checks refuse static mismatches at build time).
Any other exception, a value where TensorFlow gives an error (a silent wrap),
an error where it gives a value, or a case running past its time limit fails.
"""

import contextlib
import dataclasses
import signal
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

import towerflow as tf

CASE_SECONDS = 10.0     # a hang fails the case instead of blocking the suite
FLOAT_DTYPES = (np.float32, np.float64)
INT_DTYPES = (np.int32, np.int64)
NUMERIC_DTYPES = FLOAT_DTYPES + INT_DTYPES
# Dimensions whose product no allocator can serve (2**50 elements): "huge".
HUGE_DIM = 2 ** 25


class Case(NamedTuple):
    """One fuzzed call: ``inputs`` are fed to placeholders (of their exact
    shapes when ``static``, else of unknown shape, so that shape errors show at
    run time); ``args`` are the op's Python arguments (axis, sizes, ...)."""

    inputs: tuple
    args: dict
    static: bool

    def describe(self):
        arrays = ", ".join(f"{a.dtype}{list(a.shape)}" for a in self.inputs)
        return f"inputs ({arrays}), args {self.args}, static={self.static}"


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """A public op under fuzz.

    ``build(*tensors, **args)`` makes the op (a Tensor or a list of them);
    ``reference(*arrays, **args)`` computes TensorFlow's result with NumPy and
    raises where TensorFlow refuses the input; ``cases(rng)`` draws a Case;
    ``tolerance(case, expected)`` gives (rtol, atol) for float results;
    ``check(result, case)``, when given, judges the value instead of comparing
    it with the reference's (ops whose values are random: it asserts what must
    hold, shape and range); the reference then only says whether TensorFlow
    refuses the case."""

    name: str
    build: Callable
    reference: Callable
    cases: Callable
    tolerance: Callable | None = None
    check: Callable | None = None


class CaseTimeout(BaseException):
    """A BaseException, so that no ``except Exception`` in towerflow (the
    executor turns kernel exceptions into OpErrors) can swallow it."""


class Rejected(Exception):
    """Raised by a reference: TensorFlow refuses this input."""


# -- running one case ------------------------------------------------------------


@contextlib.contextmanager
def time_limit(seconds):
    def expire(signum, frame):
        raise CaseTimeout(f"the case ran past {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def reference_outcome(spec, case):
    """(expected value, None), or (None, the exception) if TensorFlow rejects."""
    try:
        with np.errstate(all="ignore"):
            return spec.reference(*case.inputs, **case.args), None
    except Exception as err:  # noqa: BLE001  (any refusal counts: TF raises)
        return None, err


def run_case(spec, case):
    """Build and run one case; assert the verdict described in the module doc."""
    expected, rejection = reference_outcome(spec, case)
    with tf.Graph().as_default():
        placeholders = [tf.placeholder(tf.as_dtype(array.dtype),
                                       array.shape if case.static else None)
                        for array in case.inputs]
        try:
            fetched = spec.build(*placeholders, **case.args)
        except (ValueError, TypeError) as err:
            assert rejection is not None, f"build refused a valid case: {err!r}"
            return
        result = _run_fetches(fetched, placeholders, case, rejection)
    if result is not None:
        _judge_value(spec, case, fetched, result, expected, rejection)


def _run_fetches(fetched, placeholders, case, rejection):
    """The fetched values, or None after an OpError TensorFlow would also raise."""
    with tf.Session() as sess:
        try:
            return [sess.run(fetched, dict(zip(placeholders, case.inputs)))]
        except tf.errors.OpError as err:
            assert rejection is not None, f"run refused a valid case: {err!r}"
            assert_names_op(err)
            return None


def assert_names_op(err):
    """The error says which op failed (``err.op``; a converted kernel error
    also ends its message with the node, as TensorFlow's do), and it is an
    error TensorFlow gives for bad input, not an internal one (a kernel bug)."""
    assert err.op is not None, f"{type(err).__name__} names no op: {err.message!r}"
    assert not isinstance(err, (tf.errors.InternalError, tf.errors.UnknownError)), \
        f"a kernel's own failure: {err.message!r}"
    if err.__cause__ is not None and not isinstance(err.__cause__, tf.errors.OpError):
        assert f"[[node {err.op.name} " in err.message, err.message


def _judge_value(spec, case, fetched, result, expected, rejection):
    [value] = result
    assert rejection is None, \
        f"TensorFlow refuses this case ({rejection!r}), towerflow gave {_short(value)}"
    if spec.check is not None:
        spec.check(value, case)
        return
    tolerance = spec.tolerance or elementwise_tolerance
    for tensor, actual, wanted in zip(_as_list(fetched), _as_list(value), _as_list(expected)):
        assert_same_value(actual, wanted, tensor.dtype, tolerance(case, wanted))


def _short(value):
    return np.array2string(np.asarray(value), threshold=8, edgeitems=2) \
        if not isinstance(value, (list, tuple)) else f"[{', '.join(map(_short, value))}]"


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def assert_same_value(actual, expected, dtype, tolerance):
    """``actual`` has the declared ``dtype``, which is TensorFlow's (the
    reference's), and ``expected``'s shape and values (floats within
    ``tolerance``, NaN where NaN; others exactly)."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.dtype == np.dtype(dtype.as_numpy_dtype), \
        f"dtype {actual.dtype}, declared {dtype.name}"
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype}, TF's {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape}, NumPy's {expected.shape}"
    if actual.dtype.kind == "f":
        rtol, atol = tolerance
        np.testing.assert_allclose(actual, expected.astype(actual.dtype), rtol=rtol,
                                   atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(actual, expected)


# -- tolerances --------------------------------------------------------------------


def epsilon(dtype):
    return float(np.finfo(dtype).eps) if np.dtype(dtype).kind == "f" else 0.0


def elementwise_tolerance(case, expected):
    """A few units in the last place: kernels and references may compute a
    transcendental function by different formulas."""
    eps = epsilon(np.asarray(expected).dtype)
    return 8 * eps, 8 * eps


def summed_tolerance(terms):
    """For results that sum ``terms(case)`` values: each addition may round,
    so the error grows with the number of terms times their magnitude."""
    def tolerance(case, expected):
        eps = epsilon(np.asarray(expected).dtype)
        count, magnitude = terms(case)
        return 16 * eps, 4 * eps * count * magnitude + 8 * eps
    return tolerance


# -- random inputs ----------------------------------------------------------------


def random_shape(rng, min_rank=0, max_rank=4, dims=(0, 1, 2, 3, 5)):
    """A shape of random rank; a dimension is 0 (empty tensors) one time in five."""
    rank = int(rng.integers(min_rank, max_rank + 1))
    return tuple(int(rng.choice(dims)) for _ in range(rank))


def random_values(rng, shape, dtype, specials=True):
    """Values of ``dtype``: floats normal with, when ``specials``, some NaN,
    +-inf, +-0, huge and tiny values; ints small with some at the dtype's
    limits (an in-range value: overflow stays inside the dtype); bools."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind in "iu":
        return _random_ints(rng, shape, dtype, specials)
    values = np.asarray(rng.standard_normal(shape) * 3, dtype=dtype)
    if specials and values.size:
        info = np.finfo(dtype)
        pool = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, info.max / 2, -info.max / 2,
                         info.tiny, 1.0, -1.0], dtype)
        mask = np.asarray(rng.random(shape) < 0.2)
        values[mask] = rng.choice(pool, int(mask.sum()))
    return values


def _random_ints(rng, shape, dtype, specials):
    info = np.iinfo(dtype)
    values = np.asarray(rng.integers(max(info.min, -9), 10, shape, dtype=dtype,
                                     endpoint=True))
    if specials and values.size:
        pool = np.array([info.min, info.max, 0, max(info.min, -1), 1], dtype)
        mask = np.asarray(rng.random(shape) < 0.15)
        values[mask] = rng.choice(pool, int(mask.sum()))
    return values


def broadcastable_shapes(rng, compatible):
    """Two shapes that broadcast together (``compatible``) or that do not."""
    shape = random_shape(rng, max_rank=3)
    other = tuple(1 if rng.random() < 0.3 else dim for dim in shape)
    other = other[int(rng.integers(0, len(other) + 1)):]
    if not compatible:
        shape, other = _clash(rng, shape, other)
    return (shape, other) if rng.random() < 0.5 else (other, shape)


def _clash(rng, shape, other):
    """Make one aligned dimension differ where neither is 1."""
    shape = shape or (2,)
    other = other or (1,)
    position = -int(rng.integers(1, min(len(shape), len(other)) + 1))
    left = list(shape)
    right = list(other)
    left[position] = max(left[position], 2)
    right[position] = left[position] + 1
    return tuple(left), tuple(right)


def choose(rng, options):
    return options[int(rng.integers(len(options)))]


def static_or_not(rng, chance=0.4):
    """Whether a case's input is a placeholder of static shape (else its shape
    is known only at run time): both the build path and the kernel path."""
    return bool(rng.random() < chance)
