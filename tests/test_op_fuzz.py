"""The op fuzzer (issue 32): for every public op, random shapes, dtypes and
values (empty tensors, huge values and sizes, NaN and infinities, indices
out of range, integer extremes) give NumPy's result or a ``tf.errors``
exception naming the op: never another exception, a crash, a hang or a
silent wrap. See tests/fuzz_harness.py for the verdict on one case, and
LEFT_OUT below for the public callables it does not call.

Inputs are drawn by a seeded NumPy generator per op, so a failure names its
case index and replays with ``-k <op>``.
"""

import inspect
import os
import time
import zlib

import numpy as np
import pytest
from fuzz_array_cases import ARRAY_SPECS
from fuzz_check_cases import CHECK_CONV_SPECS
from fuzz_harness import CASE_SECONDS, CaseTimeout, run_case, time_limit
from fuzz_image_cases import IMAGE_RANDOM_SPECS
from fuzz_index_cases import INDEX_SPECS
from fuzz_math_cases import MATH_SPECS
from fuzz_nn_cases import NN_SPECS

import towerflow as tf

# TOWERFLOW_FUZZ_CASES and TOWERFLOW_FUZZ_SEED widen a search (the suite's
# defaults run in seconds); a failure prints its op, case index and inputs.
CASES_PER_OP = int(os.environ.get("TOWERFLOW_FUZZ_CASES", "120"))
SEED = int(os.environ.get("TOWERFLOW_FUZZ_SEED", "32"))
SPECS = (MATH_SPECS + ARRAY_SPECS + INDEX_SPECS + NN_SPECS + IMAGE_RANDOM_SPECS +
         CHECK_CONV_SPECS)

_PLUMBING = "not an op: graph, session, scope or configuration plumbing"
_STATE = "reads or writes variables (tests/test_variables*.py, test_train.py)"
_FUNCTIONS = "runs user functions (tests/test_control_flow.py, test_debugging_ops.py)"
# The public callables the fuzzer leaves out, and why.
LEFT_OUT = {
    **dict.fromkeys((
        "add_to_collection", "as_dtype", "colocate_with", "control_dependencies", "device",
        "get_collection", "get_default_graph", "get_default_session", "get_logger",
        "get_variable_scope", "name_scope", "variable_scope", "reset_default_graph",
        "register_tensor_conversion_function", "no_regularizer", "set_random_seed",
        "random.set_random_seed", "random.set_seed", "disable_eager_execution",
        "enable_eager_execution", "executing_eagerly", "disable_resource_variables",
        "enable_resource_variables", "resource_variables_enabled", "disable_v2_behavior",
        "enable_v2_behavior", "disable_v2_tensorshape", "global_variables",
        "local_variables", "trainable_variables", "moving_average_variables",
        "glorot_normal_initializer", "glorot_uniform_initializer", "gradients",
        "add_check_numerics_ops", "group", "no_op", "losses.convert_to_tensor",
        "losses.get_regularization_loss", "losses.get_regularization_losses",
        "losses.add_loss", "losses.get_losses", "losses.get_total_loss"), _PLUMBING),
    **dict.fromkeys((
        "assign", "assign_add", "assign_sub", "count_up_to", "get_variable",
        "global_variables_initializer", "initialize_all_variables",
        "local_variables_initializer", "variables_initializer"), _STATE),
    **dict.fromkeys((
        "cond", "case", "switch_case", "while_loop", "map_fn", "py_func",
        "numpy_function", "nn.dynamic_rnn", "nn.static_rnn"), _FUNCTIONS),
    **dict.fromkeys(("constant", "convert_to_tensor", "placeholder",
                     "placeholder_with_default"),
                    "takes Python values, not tensors: their conversion (Python ints "
                    "outside the dtype) is tests/test_int_ranges.py's (issue 32, item 1)"),
    **dict.fromkeys(("Print", "print"), "returns its input; what it writes is its test's "
                    "(tests/test_debugging_ops.py)"),
    "assert_type": "a check of the static dtype only, a TypeError while building",
    "decode_raw": "takes string tensors (tests/test_queues.py, test_string_tensors.py)",
    **dict.fromkeys(("parse_single_example", "parse_example", "decode_csv", "read_file",
                     "write_file", "image.decode_png", "image.decode_jpeg",
                     "image.decode_image", "image.encode_png", "image.encode_jpeg"),
                    "take serialized records, CSV text, file names or image files, not "
                    "numbers (tests/test_records.py)"),
    "hessians": "one gradient graph per element of x, of the ops fuzzed here: checked "
                "against analytic Hessians in tests/test_second_order.py",
    # Graph-level names (issue 34, item 6): tests/test_graph_names.py
    **dict.fromkeys(("custom_gradient", "py_function"),
                    "runs user functions (tests/test_graph_names.py)"),
    **dict.fromkeys(("no_gradient", "NotDifferentiable", "import_graph_def",
                     "tables_initializer"),
                    "graph plumbing: registers a gradient, imports a GraphDef or groups "
                    "initializers (tests/test_graph_names.py)"),
    "identity_n": "returns its inputs unchanged (a tests/test_gradients.py case)",
    **dict.fromkeys((
        "nn.conv1d", "nn.atrous_conv2d", "nn.weighted_moments", "nn.xw_plus_b",
        "nn.bidirectional_dynamic_rnn", "image.resize_bilinear",
        "image.resize_nearest_neighbor", "einsum", "tensordot", "linspace", "lin_space",
        "meshgrid", "reverse_sequence", "matrix_inverse", "cholesky", "cholesky_solve",
        "matrix_determinant", "matrix_solve", "matrix_band_part", "matrix_diag",
        "matrix_diag_part", "matrix_transpose", "trace", "eye", "norm"),
        "composite or linear-algebra ops checked against NumPy float64 references and "
        "central differences in tests/test_nn_names.py (issue 34)"),
    **dict.fromkeys(("dimension_value", "dimension_at_index"),
                    "read static shapes, no tensors (tests/test_tf1_shapes.py)"),
    # sparse updates (issue 34): tests/test_sparse_updates.py checks each against NumPy
    **dict.fromkeys((
        "scatter_update", "scatter_add", "scatter_sub", "scatter_mul", "scatter_div",
        "scatter_max", "scatter_min", "scatter_nd_update", "scatter_nd_add",
        "scatter_nd_sub"), _STATE),
    **dict.fromkeys((
        "sparse_placeholder", "sparse_reorder", "sparse_tensor_dense_matmul",
        "sparse_tensor_to_dense", "sparse_to_dense"),
        "takes or makes SparseTensors, a triple of tensors the fuzzer does not draw "
        "(tests/test_sparse_updates.py)"),
    **dict.fromkeys((
        "nn.log_uniform_candidate_sampler", "nn.uniform_candidate_sampler",
        "nn.compute_accidental_hits", "nn.nce_loss", "nn.sampled_softmax_loss"),
        "draws classes at random, or takes a draw: checked given the drawn classes "
        "(tests/test_sparse_updates.py)"),
}


def public_ops():
    """Every public callable of tf, tf.nn, tf.image, tf.losses and tf.random,
    by its name in the fuzzer's table ("add", "nn.relu")."""
    modules = {"": tf, "nn.": tf.nn, "image.": tf.image, "losses.": tf.losses,
               "random.": tf.random}
    return {prefix + name for prefix, module in modules.items() for name in dir(module)
            if not name.startswith("_") and callable(getattr(module, name))
            and not inspect.isclass(getattr(module, name))}


def spec_rng(spec):
    return np.random.default_rng([SEED, zlib.crc32(spec.name.encode())])


def test_a_hanging_case_fails_instead_of_blocking_the_suite():
    """The guard's exception passes through the executor, which turns a
    kernel's exceptions into OpErrors."""
    def sleep(x):
        time.sleep(30)
        return x
    x = tf.placeholder(tf.float32)
    slow = tf.py_func(sleep, [x], tf.float32)
    started = time.monotonic()
    with tf.Session() as sess, pytest.raises(CaseTimeout), time_limit(0.2):
        sess.run(slow, {x: 1.0})
    assert time.monotonic() - started < 5


def test_every_public_op_is_fuzzed_or_left_out_for_a_reason():
    fuzzed = {spec.name.split("(")[0] for spec in SPECS}    # "reshape(shape tensor)"
    assert public_ops() - fuzzed - set(LEFT_OUT) == set()
    assert fuzzed & set(LEFT_OUT) == set()
    assert fuzzed <= public_ops()


def test_the_compatibility_page_states_how_many_ops_are_fuzzed():
    page = os.path.join(os.path.dirname(__file__), "..", "docs", "tf1-compatibility.md")
    with open(page) as text:
        words = " ".join(text.read().split())
    fuzzed = {spec.name.split("(")[0] for spec in SPECS}
    assert f"runs {len(fuzzed)} of the {len(public_ops())} public ops" in words


# NOTE: NumPy warns of the NaN and infinities the cases are made of; TensorFlow
# computes them silently, and the verdict is on the values.
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_op_gives_numpy_result_or_tf_error(spec):
    rng = spec_rng(spec)
    for index in range(CASES_PER_OP):
        case = spec.cases(rng)
        try:
            with time_limit(CASE_SECONDS):
                run_case(spec, case)
        except BaseException as err:
            raise AssertionError(f"{spec.name} case {index}: {case.describe()}: "
                                 f"{type(err).__name__}: {err}") from err
