"""TensorFlow 1.x's :class:`Dimension`: one entry of a static shape.

Indexing a :class:`~towerflow.graph.shapes.TensorShape` gives a Dimension, as
in TensorFlow 1.15, so classic programs keep working::

    x = tf.placeholder(tf.float32, [None, 784])
    x.get_shape()[1].value        # 784
    x.get_shape()[0].value        # None (unknown)
    x.get_shape()[1] * 2          # Dimension(1568); unknown stays unknown

Arithmetic with ints or Dimensions gives a Dimension, unknown if either side
is; comparisons give None when either side is unknown. ``int(dim)`` and
``range(dim)`` work on known dimensions.
"""

import operator


class Dimension:
    """The size of one dimension of a shape: an int, or unknown (None).

    ``tf.Dimension(3) + 1 == tf.Dimension(4)``;
    ``(tf.Dimension(None) + 1).value is None``.
    """

    __slots__ = ("_value",)

    def __init__(self, value):
        if value is None:
            self._value = None
        elif isinstance(value, Dimension):
            self._value = value.value
        else:
            self._value = _as_dimension_int(value)

    @property
    def value(self):
        """The size, or None when unknown."""
        return self._value

    def __repr__(self):
        return f"Dimension({self._value!r})"

    def __str__(self):
        return "?" if self._value is None else str(self._value)

    def __int__(self):
        return self._value

    def __index__(self):
        # NOTE: lets range(dim), list slicing and NumPy sizes take a known
        # Dimension; an unknown one fails there (TypeError), as in TF 1.15.
        return self._value

    def __hash__(self):
        return hash(self._value)

    def __eq__(self, other):
        """True/False when both are known, None when either is unknown."""
        other = _dimension_or_none(other)
        if other is None:
            return NotImplemented
        if self._value is None or other.value is None:
            return None
        return self._value == other.value

    def __ne__(self, other):
        other = _dimension_or_none(other)
        if other is None:
            return NotImplemented
        if self._value is None or other.value is None:
            return None
        return self._value != other.value

    def is_compatible_with(self, other):
        """True unless both are known and differ."""
        other = as_dimension(other)
        return self._value is None or other.value is None or self._value == other.value

    def assert_is_compatible_with(self, other):
        if not self.is_compatible_with(other):
            raise ValueError(f"Dimensions {self} and {other} are not compatible")

    def merge_with(self, other):
        """The known one of the two; ValueError if both are known and differ."""
        other = as_dimension(other)
        self.assert_is_compatible_with(other)
        return Dimension(other.value if self._value is None else self._value)

    def __truediv__(self, other):
        # TF 1.15 has no true division of Dimensions (a size is an integer).
        raise TypeError(f"unsupported operand type(s) for /: 'Dimension' and "
                        f"'{type(other).__name__}', please use // instead")

    def __rtruediv__(self, other):
        raise TypeError(f"unsupported operand type(s) for /: '{type(other).__name__}' "
                        "and 'Dimension', please use // instead")


def _arithmetic(function, reflected=False):
    """A Dimension operator: unknown if either operand is unknown."""
    def method(self, other):
        try:
            other = as_dimension(other)
        except (TypeError, ValueError):
            return NotImplemented
        if self.value is None or other.value is None:
            return Dimension(None)
        left, right = (other.value, self.value) if reflected else (self.value, other.value)
        return Dimension(function(left, right))
    return method


def _comparison(function):
    """A Dimension comparison: None if either operand is unknown."""
    def method(self, other):
        other = as_dimension(other)
        if self.value is None or other.value is None:
            return None
        return function(self.value, other.value)
    return method


for _name, _function in (("add", operator.add), ("sub", operator.sub),
                         ("mul", operator.mul), ("floordiv", operator.floordiv),
                         ("mod", operator.mod)):
    setattr(Dimension, f"__{_name}__", _arithmetic(_function))
    setattr(Dimension, f"__r{_name}__", _arithmetic(_function, reflected=True))
for _name, _function in (("lt", operator.lt), ("le", operator.le),
                         ("gt", operator.gt), ("ge", operator.ge)):
    setattr(Dimension, f"__{_name}__", _comparison(_function))


def _as_dimension_int(value):
    """TF 1.15's checks: a whole number >= 0 (strings of digits pass)."""
    if hasattr(value, "as_numpy_dtype"):
        raise TypeError(f"Cannot convert {value} to Dimension")
    number = int(value)
    if not isinstance(value, (str, bytes)) and number != value:
        raise ValueError(f"Ambiguous dimension: {value}")
    if number < 0:
        raise ValueError(f"Dimension {number} must be >= 0")
    return number


def _dimension_or_none(value):
    try:
        return as_dimension(value)
    except (TypeError, ValueError):
        return None


def as_dimension(value):
    """A Dimension from a Dimension (itself), an int, or None (unknown)."""
    return value if isinstance(value, Dimension) else Dimension(value)


def dimension_value(dimension):
    """The plain value of ``dimension``: an int or None.

    ``tf.dimension_value(x.get_shape()[1])`` is ``x.get_shape()[1].value``,
    and a plain int or None passes through.
    """
    return dimension.value if isinstance(dimension, Dimension) else dimension


def dimension_at_index(shape, index):
    """``shape[index]`` as a Dimension, unknown when the rank is unknown."""
    from .shapes import as_shape
    shape = as_shape(shape)
    if shape.dims is None:
        return Dimension(None)
    return Dimension(shape.dims[index])
