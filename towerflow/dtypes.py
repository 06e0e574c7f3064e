"""Element types, named as in TensorFlow (``tf.float32``) and backed by NumPy.

A :class:`DType` wraps one NumPy dtype; ``as_dtype`` accepts a DType, a NumPy
dtype or type, or a name::

    tf.as_dtype('float32') is tf.float32        # True
    tf.float32.as_numpy_dtype                     # numpy.float32

``bfloat16`` is ml_dtypes' NumPy type (the one TensorFlow and JAX use):
``tf.bfloat16.as_numpy_dtype is ml_dtypes.bfloat16``.
"""

import reprlib

import ml_dtypes
import numpy as np

# NOTE: NumPy sees ml_dtypes' bfloat16 as kind 'V' (a user-defined type), and
# np.finfo refuses it: ask these helpers, never dtype.kind or np.finfo directly.
_BFLOAT16_NUMPY = np.dtype(ml_dtypes.bfloat16)


def numpy_kind(numpy_dtype):
    """NumPy's kind letter of ``numpy_dtype``, with bfloat16 a float ('f').

    Example: ``numpy_kind(np.dtype(ml_dtypes.bfloat16)) == 'f'``.
    """
    numpy_dtype = np.dtype(numpy_dtype)
    return "f" if numpy_dtype == _BFLOAT16_NUMPY else numpy_dtype.kind


def is_bfloat16(numpy_dtype):
    """Whether a NumPy (or CuPy) dtype is bfloat16: ``is_bfloat16(x.dtype)``."""
    return numpy_dtype == _BFLOAT16_NUMPY


class DType:
    """One element type. Instances are unique, so compare with ``is`` or ``==``."""

    __slots__ = ("_np", "as_numpy_dtype", "name")

    def __init__(self, name, numpy_type):
        self.name = name
        self.as_numpy_dtype = numpy_type
        self._np = np.dtype(numpy_type)

    @property
    def is_string(self):
        return self._np.kind == "O"

    @property
    def is_floating(self):
        return numpy_kind(self._np) == "f"

    @property
    def is_integer(self):
        return self._np.kind in "iu"

    @property
    def is_bool(self):
        return self._np.kind == "b"

    @property
    def is_unsigned(self):
        return self._np.kind == "u"

    @property
    def size(self):
        return self._np.itemsize

    @property
    def base_dtype(self):
        return self

    @property
    def min(self):
        return self._limits().min

    @property
    def max(self):
        return self._limits().max

    def _limits(self):
        if self._np == _BFLOAT16_NUMPY:
            return ml_dtypes.finfo(self._np)    # as TF: values of the dtype itself
        return np.finfo(self._np) if self.is_floating else np.iinfo(self._np)

    def __repr__(self):
        return "tf." + self.name

    def __reduce__(self):
        return as_dtype, (self.name,)


float16 = DType("float16", np.float16)
bfloat16 = DType("bfloat16", ml_dtypes.bfloat16)
float32 = DType("float32", np.float32)
float64 = DType("float64", np.float64)
int8 = DType("int8", np.int8)
int16 = DType("int16", np.int16)
int32 = DType("int32", np.int32)
int64 = DType("int64", np.int64)
uint8 = DType("uint8", np.uint8)
uint16 = DType("uint16", np.uint16)
bool = DType("bool", np.bool_)
# Byte strings (file names, raw records), held as NumPy object arrays of
# ``bytes``: host-only, so string ops stay on the CPU (see placement).
string = DType("string", np.object_)
half = float16
double = float64
# An opaque host value (a While loop's saved iterations, for its gradient):
# never fed, fetched or converted, so it is in no lookup table.
variant = DType("variant", np.object_)

_ALL = (float16, bfloat16, float32, float64, int8, int16, int32, int64, uint8, uint16, bool,
        string)

# TensorFlow's type lists (the ``T: {...}`` of its op definitions), for
# register_op's ``type_list``: an input outside the list is a TypeError at build.
FLOATING_TYPES = (float16, bfloat16, float32, float64)
SIGNED_TYPES = FLOATING_TYPES + (int8, int16, int32, int64)
REAL_TYPES = SIGNED_TYPES + (uint8, uint16)      # TF's realnumbertypes: no bool
_BY_NUMPY = {dtype._np: dtype for dtype in _ALL}
_BY_NAME = {dtype.name: dtype for dtype in _ALL}
_BY_NAME.update(half=float16, double=float64, float=float32)


def as_dtype(type_value):
    """Return the :class:`DType` for a DType, NumPy dtype/type or name.

    Example: ``as_dtype(np.float64) is tf.float64``.
    """
    if isinstance(type_value, DType):
        return type_value
    if isinstance(type_value, str) and type_value in _BY_NAME:
        return _BY_NAME[type_value]
    try:
        return _BY_NUMPY[np.dtype(type_value)]
    except (TypeError, KeyError):
        accepted = ", ".join(sorted(_BY_NAME))
        raise TypeError(
            f"Cannot convert {type_value!r} to a towerflow dtype; accepted: {accepted}"
        ) from None


def default_for_python_value(value):
    """The dtype TensorFlow infers for a value: NumPy keeps its own; Python floats
    become float32, Python ints int32 (int64 when they do not fit; TypeError past
    int64), str and bytes (and arrays of them) string."""
    if is_string_value(value):
        return string
    if isinstance(value, (np.ndarray, np.generic)):
        return as_dtype(value.dtype)
    array = np.asarray(value)
    bounds = python_int_bounds(value, array)
    if bounds is not None:
        return _int_dtype_holding(value, bounds)
    kind = numpy_kind(array.dtype)
    if kind == "f":
        return float32
    if kind in "USO":
        return string
    return as_dtype(array.dtype)


def python_int_bounds(value, array):
    """The smallest and largest int in ``value``, Python ints (an int or nested
    lists of them; ``array`` is ``np.asarray(value)``), as Python ints; None for
    anything else: NumPy data, floats, bools, an empty list.

    Example: ``python_int_bounds([3, -1], np.asarray([3, -1])) == (-1, 3)``.
    """
    if isinstance(value, (np.ndarray, np.generic)) or array.size == 0:
        return None
    if array.dtype.kind in "iu":
        return int(array.min()), int(array.max())
    # NOTE: NumPy holds ints past 64 bits as objects, and a list mixing ints past
    # int64 with negatives as float64 ([2**63, -1]); a float64 array from Python
    # ints always reaches 2**63, so smaller floats need no scan.
    if array.dtype.kind == "O" or array.dtype.kind == "f" and np.abs(array).max() >= 2**63:
        items = np.asarray(value, dtype=object).ravel()
        if all(isinstance(item, int) for item in items):
            return int(min(items)), int(max(items))
    return None


def int_outside(bounds, dtype):
    """The bound of ``bounds`` (see python_int_bounds) that integer ``dtype``
    cannot hold, or None if it holds both: ``int_outside((0, 300), uint8) == 300``."""
    low, high = bounds
    if low < dtype.min:
        return low
    return high if high > dtype.max else None


def int_range_text(dtype):
    """``'[0, 255]'`` for uint8: the range error messages quote."""
    return f"[{dtype.min}, {dtype.max}]"


def _int_dtype_holding(value, bounds):
    """TensorFlow's inference for Python ints: int32, int64 past int32's range."""
    for dtype in (int32, int64):
        if int_outside(bounds, dtype) is None:
            return dtype
    raise TypeError(f"Cannot convert {short_repr(value)} to a tensor: "
                    f"{int_outside(bounds, int64)} is outside the range of int64 "
                    f"{int_range_text(int64)}, the widest integer dtype")


def short_repr(value):
    """``repr(value)`` cut short for an error message, where a million-element
    list must not fill the screen: ``short_repr(list(range(9))) == '[0, 1, 2, 3,
    4, 5, ...]'``."""
    return reprlib.repr(value)


def is_string_value(value):
    """Whether ``value`` is str/bytes or an array (or nested list) of them:
    ``is_string_value([b'a', 'b'])`` is True."""
    if isinstance(value, (str, bytes)):
        return True
    kind = np.asarray(value).dtype.kind if not isinstance(value, np.ndarray) else \
        value.dtype.kind
    if kind in "US":
        return True
    if kind != "O":
        return False
    flat = np.asarray(value, dtype=object).ravel()
    return flat.size > 0 and all(isinstance(item, (str, bytes)) for item in flat)


def as_bytes(bytes_or_text, encoding="utf-8"):
    """``tf.compat.as_bytes('Hello') == b'Hello'``; bytes pass through: how a
    string tensor holds each element."""
    if isinstance(bytes_or_text, (bytes, bytearray)):
        return bytes(bytes_or_text)
    if isinstance(bytes_or_text, str):
        return bytes_or_text.encode(encoding)
    raise TypeError(f"Expected binary or unicode string, got {bytes_or_text!r}")


def to_string_array(value):
    """``value`` (str, bytes or arrays of them) as TensorFlow holds strings: a
    NumPy object array of bytes, str encoded as UTF-8. TypeError for other items.

    Example: ``to_string_array(['a', b'b'])`` is ``array([b'a', b'b'], dtype=object)``.
    """
    source = np.asarray(value, dtype=object)
    result = np.empty(source.shape, dtype=object)
    for index, item in np.ndenumerate(source):
        if not isinstance(item, str | bytes):
            raise TypeError(f"Expected str or bytes for a string tensor, got {item!r} of "
                            f"type {type(item).__name__} in {value!r}")
        result[index] = as_bytes(item)
    return result
