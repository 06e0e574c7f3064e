"""Python ints past a dtype's range (issue 32, item 1): TensorFlow's inference
(a Python int past int32 is int64; tf.range takes the widest of its
arguments) and an error naming the value and the dtype instead of a silent
wrap-around. NumPy arrays keep NumPy's casting, as TensorFlow's astype does."""

import re

import numpy as np
import pytest

import towerflow as tf

INT32_RANGE = "[-2147483648, 2147483647]"
INT64_RANGE = "[-9223372036854775808, 9223372036854775807]"


def run(tensor, feed_dict=None):
    with tf.Session() as sess:
        return sess.run(tensor, feed_dict)


# -- inference -----------------------------------------------------------------------

@pytest.mark.parametrize("value", [2**31, -2**31 - 1, [1, 2**31], [[0], [-2**40]]])
def test_python_int_past_int32_infers_int64(value):
    tensor = tf.constant(value)
    assert tensor.dtype is tf.int64
    np.testing.assert_array_equal(run(tensor), np.array(value, dtype=np.int64))


def test_python_ints_at_the_int32_edges_stay_int32():
    tensor = tf.constant([2**31 - 1, -2**31])
    assert tensor.dtype is tf.int32
    np.testing.assert_array_equal(run(tensor), [2**31 - 1, -2**31])


@pytest.mark.parametrize("value, culprit", [
    (2**63, 2**63), (-2**63 - 1, -2**63 - 1), (2**64, 2**64),
    # NumPy makes this list float64 (ints past int64 and negatives): still ints.
    ([2**63, -1], 2**63),
])
def test_python_int_past_int64_is_refused_naming_the_value(value, culprit):
    message = (f"Cannot convert {value!r} to a tensor: {culprit} is outside the range "
               f"of int64 {INT64_RANGE}, the widest integer dtype")
    with pytest.raises(TypeError, match=re.escape(message)):
        tf.constant(value)


# -- a requested dtype ---------------------------------------------------------------

@pytest.mark.parametrize("value, dtype, culprit, bounds", [
    (2**31, tf.int32, 2**31, INT32_RANGE),
    (-2**31 - 1, tf.int32, -2**31 - 1, INT32_RANGE),
    (300, tf.uint8, 300, "[0, 255]"),
    (-1, tf.uint8, -1, "[0, 255]"),
    ([1, 2, 70000], tf.int16, 70000, "[-32768, 32767]"),
    ([[2**63]], tf.int64, 2**63, INT64_RANGE),
])
def test_python_int_outside_the_requested_dtype_is_refused(value, dtype, culprit, bounds):
    message = (f"Cannot convert {value!r} to a tensor of dtype {dtype.name}: {culprit} "
               f"is outside its range {bounds}")
    with pytest.raises(TypeError, match=re.escape(message)):
        tf.constant(value, dtype=dtype)


def test_python_ints_inside_the_requested_dtype_convert():
    np.testing.assert_array_equal(run(tf.constant([0, 255], dtype=tf.uint8)), [0, 255])
    assert run(tf.constant(-2**31, dtype=tf.int32)) == -2**31


def test_huge_python_int_converts_to_a_float_dtype():
    assert run(tf.constant(2**70, dtype=tf.float32)) == np.float32(2.0**70)


def test_numpy_array_with_a_dtype_keeps_numpys_cast():
    """TensorFlow converts an array with astype: the caller chose NumPy's rules."""
    value = np.array([2**31, 5], dtype=np.int64)
    np.testing.assert_array_equal(run(tf.constant(value, dtype=tf.int32)),
                                  value.astype(np.int32))


def test_convert_to_tensor_falls_back_from_a_preferred_dtype_that_cannot_hold_it():
    tensor = tf.convert_to_tensor(2**31, preferred_dtype=tf.int32)
    assert tensor.dtype is tf.int64
    assert run(tensor) == 2**31


def test_python_operand_outside_the_tensors_dtype_is_refused():
    message = (f"Cannot convert 2147483648 to a tensor of dtype int32: 2147483648 is "
               f"outside its range {INT32_RANGE}")
    with pytest.raises(TypeError, match=re.escape(message)):
        tf.ones([2], tf.int32) * 2**31


def test_python_operand_inside_the_tensors_dtype_still_works():
    np.testing.assert_array_equal(run(tf.ones([2], tf.int32) * (2**31 - 1)), [2**31 - 1] * 2)


# -- feeds ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, value, culprit, bounds", [
    (tf.int32, [2**31, 5], 2**31, INT32_RANGE),
    (tf.int32, 2**31, 2**31, INT32_RANGE),
    (tf.uint8, [300, 1], 300, "[0, 255]"),
    (tf.uint8, [-1, 1], -1, "[0, 255]"),
])
def test_feeding_a_python_int_outside_the_placeholder_dtype_is_refused(dtype, value, culprit,
                                                                       bounds):
    """TensorFlow raises TypeError ("... Try explicitly setting the type of the feed
    tensor to a larger type (e.g. int64)"); towerflow's feed errors are
    InvalidArgumentErrors: the error is both."""
    shape = [2] if isinstance(value, list) else []
    placeholder = tf.placeholder(dtype, shape, name="x")
    message = (f"Cannot feed value {value!r} to Tensor 'x:0' of dtype {dtype.name}: "
               f"{culprit} is outside its range {bounds}. Try explicitly setting the type "
               "of the feed tensor to a larger type (e.g. int64).")
    for error_class in (TypeError, tf.errors.InvalidArgumentError):
        with pytest.raises(error_class, match=re.escape(message)):
            run(placeholder, {placeholder: value})


def test_feeding_python_ints_that_fit_a_narrow_dtype_works():
    placeholder = tf.placeholder(tf.uint8, [2])
    fed = run(placeholder, {placeholder: [0, 255]})
    assert fed.dtype == np.uint8
    np.testing.assert_array_equal(fed, [0, 255])


# -- tf.range ------------------------------------------------------------------------

def test_range_past_int32_is_int64():
    tensor = tf.range(2**31, 2**31 + 3)
    assert tensor.dtype is tf.int64
    np.testing.assert_array_equal(run(tensor), [2**31, 2**31 + 1, 2**31 + 2])


def test_range_takes_the_widest_argument_dtype():
    assert tf.range(0, 2**40, 2**39).dtype is tf.int64
    assert tf.range(0, 3, np.float64(1.0)).dtype is tf.float64


def test_range_with_delta_pointing_away_from_a_large_limit_is_refused():
    """TensorFlow's Range shape function: InvalidArgument, a ValueError when the
    graph is built, not a 2.1e9-element range from a wrapped limit."""
    with pytest.raises(ValueError,
                       match="Requires start >= limit when delta < 0: -3/2147483648"):
        tf.range(-3, 2**31, -1)


def test_range_with_a_requested_dtype_too_narrow_is_refused():
    message = (f"Cannot convert 2147483648 to a tensor of dtype int32: 2147483648 is "
               f"outside its range {INT32_RANGE}")
    with pytest.raises(TypeError, match=re.escape(message)):
        tf.range(2**31, dtype=tf.int32)
