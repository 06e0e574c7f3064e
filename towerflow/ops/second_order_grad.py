"""Gradients of the ops that gradients are built from, for second-order
derivatives (gradient penalties, Hessians, Hessian-vector products), after
TensorFlow 1.15's nn_grad.py and math_grad.py.

Most of these ops are linear in the gradient they carry: ``G(grad) = A^T
grad`` for the forward op's Jacobian A, so their gradient with respect to
``grad`` is ``A g`` -- the forward op again, applied to the incoming ``g``
(TileGrad's is Tile, AvgPoolGrad's is AvgPool, StridedSliceGrad's is
StridedSlice). The inputs they take for a shape only (``like``) get None.
Where the forward derivative depends on a value (TanhGrad on y, EluGrad on
y), that value gets the second-derivative term, as in TensorFlow; where it
is piecewise constant (ReluGrad, MaxPoolGrad) it gets zeros, as in
TensorFlow. The gradients TF builds from differentiable ops but towerflow
runs as one kernel (EinsumGrad, CholeskyGrad, MatrixDiagPartGrad,
DynamicTileGrad) get a gradient of their own. Imported once by
towerflow/__init__.py, after every op exists.
"""

# NOTE: activation_ops, einsum_ops and pad_ops are imported for their gradient ops to
# exist before they get gradients here
from ..graph.registry import register_gradient
from . import activation_ops, einsum_ops, linalg_ops, math_ops, pad_ops  # noqa: F401
from .array_ops import concat
from .constant_ops import convert_to_tensor, ones_like, zeros_like


def _create(op, op_type, inputs, attrs=None):
    return op.graph.create_op(op_type, inputs, dict(attrs or {})).outputs[0]


def _nones(count):
    return [None] * count


# -- elementwise activations ------------------------------------------------------


def _relu_grad_grad(op, grad):
    """ReluGrad(dy, y) = dy * (y > 0): linear in dy, flat in y."""
    y = op.inputs[1]
    return [_create(op, "ReluGrad", [grad, y]), zeros_like(y)]


def _tanh_grad_grad(op, grad):
    """TanhGrad(y, dy) = dy * (1 - y^2)."""
    y, dy = op.inputs
    return [grad * -2.0 * dy * y, _create(op, "TanhGrad", [y, grad])]


def _sigmoid_grad_grad(op, grad):
    """SigmoidGrad(y, dy) = dy * y * (1 - y)."""
    y, dy = op.inputs
    scaled = grad * dy
    return [scaled - 2.0 * scaled * y, _create(op, "SigmoidGrad", [y, grad])]


def _elu_grad_grad(op, grad):
    """EluGrad(dy, y) = dy where y > 0, else dy * (y + 1)."""
    dy, y = op.inputs
    return [_create(op, "EluGrad", [grad, y]),
            math_ops.where(math_ops.less(y, 0.0), grad * dy, zeros_like(y))]


def _gelu_grad_grad(op, grad):
    """GeluGrad(dy, x) = dy * gelu'(x)."""
    dy, x = op.inputs
    approximate = op.attrs["approximate"]
    second = _gelu_tanh_second(x) if approximate else _gelu_exact_second(x)
    return [_create(op, "GeluGrad", [grad, x], {"approximate": approximate}),
            grad * dy * second]


def _gelu_exact_second(x):
    """gelu''(x) = pdf(x) * (2 - x^2) for gelu(x) = x * cdf(x)."""
    pdf = math_ops.exp(-0.5 * math_ops.square(x)) * (1.0 / (2.0 * 3.141592653589793) ** 0.5)
    return pdf * (2.0 - math_ops.square(x))


def _gelu_tanh_second(x):
    """The tanh form 0.5 x (1 + tanh(u)), u = c (x + k x^3): its second
    derivative (1 - t^2) (u' + x (u'' / 2 - t u'^2))."""
    c, k = (2.0 / 3.141592653589793) ** 0.5, 0.044715
    t = math_ops.tanh(c * (x + k * x * math_ops.square(x)))
    du = c * (1.0 + 3.0 * k * math_ops.square(x))
    ddu = c * 6.0 * k * x
    return (1.0 - math_ops.square(t)) * (du + x * (0.5 * ddu - t * math_ops.square(du)))


def _leaky_relu_grad_grad(op, grad):
    """LeakyReluGrad(dy, x) = dy where x > 0, else alpha * dy: linear in dy, flat in x."""
    x = op.inputs[1]
    return [_create(op, "LeakyReluGrad", [grad, x], op.attrs), zeros_like(x)]


def _relu6_grad_grad(op, grad):
    """Relu6Grad(dy, y) = dy where 0 < y < 6: linear in dy, flat in y."""
    y = op.inputs[1]
    return [_create(op, "Relu6Grad", [grad, y], op.attrs), zeros_like(y)]


def _selu_grad_grad(op, grad):
    """SeluGrad(dy, y) = scale * dy where y > 0, else dy * (y + scale * alpha).
    NOTE: the form of TF's corrected _SeluGradGrad; earlier TFs gave dy
    EluGrad(grad, the op's own output), which central differences refute."""
    dy, y = op.inputs
    return [_create(op, "SeluGrad", [grad, y], op.attrs),
            math_ops.where(math_ops.less(y, 0.0), grad * dy, zeros_like(y))]


def _softplus_grad_grad(op, grad):
    """SoftplusGrad(dy, x) = dy * sigmoid(x); sigmoid'(x) = 1 / (e^-x + 2 + e^x)."""
    dy, x = op.inputs
    return [_create(op, "SoftplusGrad", [grad, x], op.attrs),
            grad * dy / (math_ops.exp(-x) + 2.0 + math_ops.exp(x))]


register_gradient("ReluGrad", _relu_grad_grad)
register_gradient("LeakyReluGrad", _leaky_relu_grad_grad)
register_gradient("Relu6Grad", _relu6_grad_grad)
register_gradient("SeluGrad", _selu_grad_grad)
register_gradient("SoftplusGrad", _softplus_grad_grad)
# SoftsignGrad has none, as in TF 1.15
register_gradient("TanhGrad", _tanh_grad_grad)
register_gradient("SigmoidGrad", _sigmoid_grad_grad)
register_gradient("EluGrad", _elu_grad_grad)
register_gradient("GeluGrad", _gelu_grad_grad)

# -- the engine's and the reductions' helpers ---------------------------------------


def _broadcast_like(grad, like):
    """``grad`` broadcast to the shape of ``like`` (run-time shapes too)."""
    return grad + zeros_like(like)


def _reduced_like(op, grad):
    """The gradient of a spread of ``op.inputs[0]`` over the input's shape:
    the sum (a mean's: the mean) over the axes the forward reduction took."""
    reduce = math_ops.reduce_mean if op.attrs["mean"] else math_ops.reduce_sum
    return reduce(grad, op.attrs["axes"], keepdims=op.attrs["keepdims"])


def _extremum_grad_grad(op, grad):
    """ReduceExtremumGrad(dy, x, m) = dy spread over the extremes, each a
    1 / ties share: linear in dy, flat in x and m."""
    dy, x, extreme = op.inputs
    shares = _create(op, "ReduceExtremumGrad", [ones_like(dy), x, extreme], op.attrs)
    return [math_ops.reduce_sum(grad * shares, op.attrs["axes"],
                                keepdims=op.attrs["keepdims"]), None, None]


register_gradient("UnbroadcastGrad", lambda op, g: [_broadcast_like(g, op.inputs[0]), None])
register_gradient("ReshapeLike", lambda op, g: [_create(op, "ReshapeLike",
                                                        [g, op.inputs[0]]), None])
register_gradient("ReductionGrad", lambda op, g: [_reduced_like(op, g), None])
register_gradient("ReduceExtremumGrad", _extremum_grad_grad)
register_gradient("BiasAddGrad", lambda op, g: [_broadcast_like(g, op.inputs[0])])

# -- array ops' gradients: the forward op again --------------------------------------


def _concat_grad_grad(op, *grads):
    grads = [zeros_like(out) if g is None else g for g, out in zip(grads, op.outputs)]
    return [concat(grads, op.attrs["axis"])] + _nones(len(op.inputs) - 1)


def _pad_grad_grad(op, grad):
    attrs = {"paddings": op.attrs["paddings"], "mode": op.attrs["mode"]}
    if attrs["mode"] == "constant":
        zero = convert_to_tensor(0, dtype=grad.dtype)
        return [_create(op, "PadV2", [grad, zero], attrs), None]
    return [_create(op, "MirrorPad", [grad], attrs), None]


def _strided_slice_grad_grad(op, grad):
    bounds = list(op.inputs[2:])
    return [_create(op, "StridedSlice", [grad] + bounds, {"spec": op.attrs["spec"]})] + \
        _nones(1 + len(bounds))


register_gradient("ConcatGrad", _concat_grad_grad)
register_gradient("TileGrad", lambda op, g: [_create(op, "Tile", [g], op.attrs), None])
register_gradient("DynamicTileGrad", lambda op, g: [
    _create(op, "DynamicTile", [g, op.inputs[2]]), None, None])
register_gradient("PadGrad", _pad_grad_grad)
register_gradient("StridedSliceGrad", _strided_slice_grad_grad)
register_gradient("GatherGrad", lambda op, g: [
    _create(op, "GatherV2", [g, op.inputs[2]], {"axis": op.attrs["axis"]}), None, None])
register_gradient("GatherNdGrad", lambda op, g: [
    _create(op, "GatherNd", [g, op.inputs[2]]), None, None])
register_gradient("BooleanMaskGrad", lambda op, g: [
    _create(op, "BooleanMask", [g, op.inputs[2]], op.attrs), None, None])

# -- pooling ----------------------------------------------------------------------


def _pool_attrs(op):
    return {key: op.attrs[key] for key in ("ksize", "strides", "padding")}


def _max_pool_grad_grad(op, grad):
    """MaxPoolGrad(x, winner, dy) routes dy to each window's first maximum."""
    x, winner = op.inputs[:2]
    return [zeros_like(x), None,
            _create(op, "MaxPoolGradGrad", [x, winner, grad], _pool_attrs(op))]


def _max_pool_grad_grad_grad(op, grad):
    x, winner = op.inputs[:2]
    return [zeros_like(x), None, _create(op, "MaxPoolGrad", [x, winner, grad], _pool_attrs(op))]


register_gradient("AvgPoolGrad", lambda op, g: [None, _create(op, "AvgPool", [g],
                                                              _pool_attrs(op))])
register_gradient("MaxPoolGrad", _max_pool_grad_grad)
register_gradient("MaxPoolGradGrad", _max_pool_grad_grad_grad)

# -- convolutions -----------------------------------------------------------------


def _conv2d_backprop_filter_grad(op, grad):
    """Conv2DBackpropFilter(patches of x, dy): <grad, dw> = <conv2d(x, grad), dy>,
    so dy gets conv2d(x, grad) and x gets Conv2DBackpropInput(x, grad, dy),
    given at the patches in x's shape (see conv_ops' Conv2DBackpropFilter)."""
    patches, dy = op.inputs
    conv = patches.op
    if conv.type != "Conv2D":
        raise LookupError(f"No gradient defined for operation '{op.name}' (op type: "
                          f"{op.type}) over patches of a {conv.type}")
    x = conv.inputs[0]
    attrs = {"strides": op.attrs["strides"], "padding": op.attrs["padding"]}
    grad_dy = op.graph.create_op("Conv2D", [x, grad], attrs).outputs[0]
    grad_x = _create(op, "Conv2DBackpropInput", [x, grad, dy], attrs)
    return [grad_x, grad_dy]


def _depthwise_attrs(op):
    return {key: op.attrs[key] for key in ("strides", "padding", "dilations")}


def _depthwise_input_grad(op, grad):
    """BackpropInput(x, w, dy) = A(w)^T dy: <grad, it> = <depthwise(grad, w), dy>."""
    _, w, dy = op.inputs
    attrs = _depthwise_attrs(op)
    return [None, _create(op, "DepthwiseConv2dNativeBackpropFilter", [grad, w, dy], attrs),
            _create(op, "DepthwiseConv2dNative", [grad, w], attrs)]


def _depthwise_filter_grad(op, grad):
    """BackpropFilter(x, w, dy): <grad, it> = <depthwise(x, grad), dy>."""
    x, _, dy = op.inputs
    attrs = _depthwise_attrs(op)
    return [_create(op, "DepthwiseConv2dNativeBackpropInput", [x, grad, dy], attrs), None,
            _create(op, "DepthwiseConv2dNative", [x, grad], attrs)]


register_gradient("Conv2DBackpropFilter", _conv2d_backprop_filter_grad)
register_gradient("DepthwiseConv2dNativeBackpropInput", _depthwise_input_grad)
register_gradient("DepthwiseConv2dNativeBackpropFilter", _depthwise_filter_grad)

# -- fused batch normalisation ----------------------------------------------------


def _fused_batch_norm_grad_grad(op, *grads):
    """As TensorFlow's _FusedBatchNormGradGrad: the gradient of the batch-norm
    gradient rebuilt from elementwise ops and reductions, differentiated by
    the ordinary engine. In training the statistics are recomputed from x
    (so x's gradient includes the paths through them)."""
    from .. import autodiff
    dy, x, scale = op.inputs[:3]
    training = op.attrs["is_training"]
    if training is None:
        raise LookupError(f"No second-order gradient for '{op.name}' (op type: {op.type}) "
                          "with is_training a tensor: give fused_batch_norm a Python bool")
    composite = _batch_norm_grad_composite(dy, x, math_ops.cast(scale, x.dtype), op,
                                           training)
    wanted = [dy, x, scale]
    # NOTE: stopped at the op's inputs: dy depends on x (through the forward
    # pass), a path the outer walk takes itself
    second = autodiff.gradients(composite, wanted, grad_ys=list(grads),
                                name="FusedBatchNormGradGrad", stop_gradients=wanted)
    second = [zeros_like(t) if g is None else g for t, g in zip(wanted, second)]
    return second + _nones(len(op.inputs) - 3)


def _batch_norm_grad_composite(dy, x, scale, op, training):
    """(dx, dscale, doffset) of batch normalisation over every axis but the last."""
    axes = list(range(x.shape.ndims - 1))
    if training:
        mean = math_ops.reduce_mean(x, axes)
        inv_std = math_ops.rsqrt(math_ops.reduce_mean(math_ops.square(x - mean), axes) +
                                 op.attrs["epsilon"])
    else:
        mean, inv_std = (math_ops.cast(t, x.dtype) for t in op.inputs[3:5])
    centered = x - mean
    grad_offset = math_ops.reduce_sum(dy, axes)
    grad_scale = math_ops.reduce_sum(dy * centered, axes) * inv_std
    gain = scale * inv_std
    if not training:
        return [dy * gain, grad_scale, grad_offset]
    grad_x = gain * (dy - math_ops.reduce_mean(dy, axes) - centered * math_ops.square(inv_std)
                     * math_ops.reduce_mean(dy * centered, axes))
    return [grad_x, grad_scale, grad_offset]


register_gradient("FusedBatchNormGrad", _fused_batch_norm_grad_grad)

# -- einsum and linear algebra: TF builds these gradients from differentiable ops ---


def _einsum_grad_grad(op, grad):
    """EinsumGrad(G, *A) = d<G, einsum(A)> / dA_i is linear in G and in every
    other operand, and free of A_i: <grad, it> = <G, einsum(A with A_i :=
    grad)>, so G gets that einsum and each other operand k its EinsumGrad."""
    dy, *operands = op.inputs
    index = op.attrs["index"]
    swapped = operands[:index] + [grad] + operands[index + 1:]
    attrs = {key: op.attrs[key] for key in ("inputs", "output", "equation")}
    others = [None if k == index else _create(op, "EinsumGrad", [dy, *swapped],
                                              {**attrs, "index": k})
              for k in range(len(operands))]
    return [_create(op, "Einsum", swapped, attrs)] + others


def _cholesky_grad_grad(op, grad):
    """As _fused_batch_norm_grad_grad: TF's _CholeskyGrad rebuilt from
    matrix_inverse, matmul and the band and diagonal ops, differentiated by
    the ordinary engine (TF's CholeskyGrad is those ops, so TF has this)."""
    from .. import autodiff
    wanted = list(op.inputs)   # (lower, dl)
    composite = _cholesky_grad_composite(*wanted)
    second = autodiff.gradients(composite, wanted, grad_ys=grad, name="CholeskyGradGrad",
                                stop_gradients=wanted)
    return [zeros_like(t) if g is None else g for t, g in zip(wanted, second)]


def _cholesky_grad_composite(lower, grad):
    """sym(L^-T Phi(L^T grad) L^-1), Phi: the lower triangle, its diagonal halved."""
    inverse = linalg_ops.matrix_inverse(lower)
    middle = math_ops.matmul(lower, grad, transpose_a=True)
    middle = (linalg_ops.matrix_band_part(middle, -1, 0) -
              0.5 * linalg_ops.matrix_diag(linalg_ops.matrix_diag_part(middle)))
    grad_a = math_ops.matmul(math_ops.matmul(inverse, middle, transpose_a=True), inverse)
    return 0.5 * (grad_a + linalg_ops.matrix_transpose(grad_a))


register_gradient("EinsumGrad", _einsum_grad_grad)
register_gradient("CholeskyGrad", _cholesky_grad_grad)
register_gradient("MatrixDiagPartGrad", lambda op, g: [
    _create(op, "MatrixDiagPart", [g], {"_what": "MatrixDiagPart"}), None])
