"""The activations TF 1.15 has beyond relu/elu/gelu: ``leaky_relu``,
``relu6``, ``selu``, ``softplus``, ``softsign`` (each an op with its
gradient op, as TF's kernels) and ``swish`` (composed, as TF 1.15's
``nn_impl.swish``). Exposed as ``tf.nn`` (and ``tf.math.softplus``,
``tf.math.softsign``)."""

from .. import dtypes
from ..graph.registry import register_gradient, register_op
from . import math_ops
from .constant_ops import convert_to_tensor

# TF 1.15's selu constants (nn_ops.cc, SeluOp).
SELU_SCALE = 1.0507009873554804934193349852946
SELU_ALPHA = 1.6732632423543772848170429916717


def _same_as_input(inputs, attrs):
    return [(inputs[0].shape, inputs[0].dtype)]


def _create(op_type, inputs, attrs=None, name=None):
    return inputs[0].graph.create_op(op_type, inputs, attrs or {},
                                     name=name or op_type).outputs[0]


def _gradient_through(grad_type, saved="input"):
    """The gradient as TF computes it: ``grad_type(grad, x or y[, alpha])``."""
    def gradient(op, grad):
        kept = op.inputs[0] if saved == "input" else op.outputs[0]
        return [_create(grad_type, [grad, kept], dict(op.attrs))]
    return gradient


# (op type, type list, what its gradient op reads: TF's choice in nn_grad.py)
_ACTIVATIONS = (("LeakyRelu", dtypes.FLOATING_TYPES, "input"),
                ("Relu6", dtypes.REAL_TYPES, "output"),
                ("Selu", dtypes.FLOATING_TYPES, "output"),
                ("Softplus", dtypes.FLOATING_TYPES, "input"),
                ("Softsign", dtypes.FLOATING_TYPES, "input"))

for _op_type, _types, _saved in _ACTIVATIONS:
    register_op(_op_type, _same_as_input, exact_gradients=True, type_list=_types,
                typed_input="features")
    register_op(_op_type + "Grad", _same_as_input)   # (grad, x or y)
    register_gradient(_op_type, _gradient_through(_op_type + "Grad", _saved))


def leaky_relu(features, alpha=0.2, name=None):
    """x if x > 0 else alpha * x; integers are cast to float32 first, as TF
    1.15 does: ``tf.nn.leaky_relu(h)`` (alpha 0.2), ``tf.nn.leaky_relu(h, 0.01)``."""
    x = convert_to_tensor(features, name="features")
    if x.dtype.is_integer:
        x = math_ops.cast(x, dtypes.float32)
    return _create("LeakyRelu", [x], {"alpha": float(alpha)}, name or "LeakyRelu")


def relu6(features, name=None):
    """min(max(x, 0), 6): ``tf.nn.relu6(x)``."""
    return _create("Relu6", [convert_to_tensor(features, name="features")], name=name)


def selu(features, name=None):
    """scale * (x if x > 0 else alpha * (exp(x) - 1)), with TF's scale and
    alpha (Klambauer et al. 2017): ``tf.nn.selu(x)``."""
    return _create("Selu", [convert_to_tensor(features, name="features")], name=name)


def softplus(features, name=None):
    """log(exp(x) + 1), without overflow: ``tf.nn.softplus(x)``."""
    return _create("Softplus", [convert_to_tensor(features, name="features")], name=name)


def softsign(features, name=None):
    """x / (|x| + 1): ``tf.nn.softsign(x)``."""
    return _create("Softsign", [convert_to_tensor(features, name="features")], name=name)


def swish(features):
    """x * sigmoid(x) (Ramachandran et al. 2017), as TF 1.15's ``tf.nn.swish``;
    its gradient is the product rule's, which equals TF's custom gradient
    sigmoid(x) * (1 + x * (1 - sigmoid(x)))."""
    x = convert_to_tensor(features, name="features")
    return math_ops.multiply(x, math_ops.sigmoid(x), name="swish")
