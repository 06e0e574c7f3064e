"""The gradients of math_ops.py's ops (elementwise, matmul, reductions, casts),
and the ops only they build (TanhGrad, SigmoidGrad, ReductionGrad,
ReduceExtremumGrad). Each returns one gradient per input; the autodiff engine
sums them back over broadcast axes, so these never need to."""

from ..graph.registry import register_gradient, register_not_differentiable, register_op
from .constant_ops import zeros_like
from .math_ops import (
    COMPARISON_OPS,
    FLOAT_CHECK_OPS,
    _same_as_input,
    cast,
    cos,
    floordiv,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    matmul,
    maximum,
    negative,
    pow,  # the Pow op's builder, as in math_ops (not the builtin)
    sign,
    sin,
    square,
    where,
)

register_not_differentiable(*COMPARISON_OPS, *FLOAT_CHECK_OPS, "LogicalNot", "LogicalAnd",
                            "LogicalOr", "Sign", "Floor", "Ceil", "Round", "FloorDiv", "ArgMax",
                            "ArgMin", "Any", "All")

register_op("TanhGrad", _same_as_input)      # (y, grad) -> grad * (1 - y^2)
register_op("SigmoidGrad", _same_as_input)   # (y, grad) -> grad * y * (1 - y)


def _activation_grad(op_type):
    def gradient(op, grad):
        y = op.outputs[0]
        return [y.graph.create_op(op_type, [y, grad]).outputs[0]]
    return gradient


_UNARY_GRADIENTS = {
    "Neg": lambda op, g: [negative(g)],
    "Abs": lambda op, g: [g * sign(op.inputs[0])],
    "Square": lambda op, g: [g * (op.inputs[0] * 2.0)],
    "Sqrt": lambda op, g: [g * 0.5 / op.outputs[0]],
    "Rsqrt": lambda op, g: [g * -0.5 * op.outputs[0] * square(op.outputs[0])],
    "Exp": lambda op, g: [g * op.outputs[0]],
    "Log": lambda op, g: [g / op.inputs[0]],
    "Log1p": lambda op, g: [g / (op.inputs[0] + 1.0)],
    "Reciprocal": lambda op, g: [-g * square(op.outputs[0])],
    "Sin": lambda op, g: [g * cos(op.inputs[0])],
    "Cos": lambda op, g: [-g * sin(op.inputs[0])],
    "Tanh": _activation_grad("TanhGrad"),
    "Sigmoid": _activation_grad("SigmoidGrad"),
}
for _op_type, _gradient in _UNARY_GRADIENTS.items():
    register_gradient(_op_type, _gradient)


def _mask(condition, like):
    return cast(condition, like.dtype)


def _pow_grad(op, grad):
    x, y = op.inputs
    z = op.outputs[0]
    grad_x = grad * y * pow(x, y - 1.0)
    safe_log = log(maximum(x, 0.0) + _mask(less_equal(x, 0.0), x))  # log(x), 0 where x <= 0
    return [grad_x, grad * z * safe_log]


_BINARY_GRADIENTS = {
    "Add": lambda op, g: [g, g],
    "Sub": lambda op, g: [g, negative(g)],
    "Mul": lambda op, g: [g * op.inputs[1], g * op.inputs[0]],
    "RealDiv": lambda op, g: [g / op.inputs[1],
                              -g * op.inputs[0] / square(op.inputs[1])],
    "FloorMod": lambda op, g: [g, -g * floordiv(op.inputs[0], op.inputs[1])],
    "Pow": _pow_grad,
    "Maximum": lambda op, g: [g * _mask(greater_equal(*op.inputs), g),
                              g * _mask(less(*op.inputs), g)],
    "Minimum": lambda op, g: [g * _mask(less_equal(*op.inputs), g),
                              g * _mask(greater(*op.inputs), g)],
    "SquaredDifference": lambda op, g: _squared_difference_grad(op, g),
}


def _squared_difference_grad(op, grad):
    grad_x = grad * 2.0 * (op.inputs[0] - op.inputs[1])
    return [grad_x, negative(grad_x)]


for _op_type, _gradient in _BINARY_GRADIENTS.items():
    register_gradient(_op_type, _gradient)


def _matmul_grad(op, grad):
    a, b = op.inputs
    transpose_a, transpose_b = op.attrs["transpose_a"], op.attrs["transpose_b"]
    if not transpose_a and not transpose_b:
        return [matmul(grad, b, transpose_b=True), matmul(a, grad, transpose_a=True)]
    if not transpose_a:
        return [matmul(grad, b), matmul(grad, a, transpose_a=True)]
    if not transpose_b:
        return [matmul(b, grad, transpose_b=True), matmul(a, grad)]
    return [matmul(b, grad, transpose_a=True, transpose_b=True),
            matmul(grad, a, transpose_a=True, transpose_b=True)]


register_gradient("MatMul", _matmul_grad)
register_gradient("AddN", lambda op, g: [g] * len(op.inputs))
register_gradient("Select", lambda op, g: [
    None, where(op.inputs[0], g, zeros_like(g)), where(op.inputs[0], zeros_like(g), g)])
register_gradient("Cast", lambda op, g: [cast(g, op.inputs[0].dtype)
                                         if op.inputs[0].dtype.is_floating else None])


def _reduction_grad_shape(inputs, attrs):
    return [(inputs[1].shape, inputs[0].dtype)]


# (grad of the reduced value, input) -> grad spread back over the input's shape,
# divided by the count of reduced elements for a mean.
register_op("ReductionGrad", _reduction_grad_shape)
# (grad, input, reduced value) -> grad shared among the input's extreme elements.
register_op("ReduceExtremumGrad", _reduction_grad_shape)


def _spread_grad(op_type, mean=False):
    def gradient(op, grad):
        attrs = {"axes": op.attrs["axes"], "keepdims": op.attrs["keepdims"], "mean": mean}
        inputs = [grad, op.inputs[0]] + ([op.outputs[0]] if op_type != "ReductionGrad"
                                         else [])
        return [grad.graph.create_op(op_type, inputs, attrs).outputs[0]]
    return gradient


register_gradient("Sum", _spread_grad("ReductionGrad"))
register_gradient("Mean", _spread_grad("ReductionGrad", mean=True))
register_gradient("Max", _spread_grad("ReduceExtremumGrad"))
register_gradient("Min", _spread_grad("ReduceExtremumGrad"))


def _prod_grad(op, grad):
    # NOTE: d(prod)/dx = prod / x; undefined where x == 0 (as in a naive TF graph).
    spread = _spread_grad("ReductionGrad")(op, grad)[0]
    expanded = _spread_grad("ReductionGrad")(op, op.outputs[0])[0]
    return [spread * expanded / op.inputs[0]]


register_gradient("Prod", _prod_grad)
