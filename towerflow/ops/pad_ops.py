"""Ops that grow a tensor from its own values: tf.pad (CONSTANT, REFLECT,
SYMMETRIC) and tf.tile, each with its gradient."""

from ..graph import core, shapes
from ..graph.registry import register_gradient, register_op
from ..graph.shapes import TensorShape, unknown_shape
from . import shape_values
from .constant_ops import constant_value, convert_to_tensor, static_ints

_MIRROR_MODES = {"REFLECT": "reflect", "SYMMETRIC": "symmetric"}

# -- pad ----------------------------------------------------------------------------


def _grown_shape(x, per_dim, rank_error, grow):
    """x's shape with ``grow(dim, per_dim[d])`` for each known dim d."""
    if x.shape.ndims is None:
        return [(unknown_shape(len(per_dim)), x.dtype)]
    if x.shape.ndims != len(per_dim):
        raise ValueError(rank_error)
    dims = [None if dim is None else grow(dim, item)
            for dim, item in zip(x.shape.dims, per_dim)]
    return [(TensorShape(dims), x.dtype)]


def _pad_shape(inputs, attrs):
    x, paddings = inputs[0], attrs["paddings"]
    result = _grown_shape(x, paddings, f"The first dimension of paddings must be the rank "
                          f"of inputs[{len(paddings)},2], input shape {x.shape}",
                          lambda dim, pair: dim + sum(pair))
    if x.shape.ndims is not None:
        shapes.check_mirror_padding(x.shape.dims, paddings, attrs["mode"])
    return result


register_op("PadV2", _pad_shape)
register_op("MirrorPad", _pad_shape)


def pad(tensor, paddings, mode="CONSTANT", name=None, constant_values=0):
    """``tensor`` with ``paddings[d] = [before, after]`` values added on each
    side of dimension d: ``constant_values`` (CONSTANT), the values mirrored
    without the edge (REFLECT) or with it (SYMMETRIC)::

        tf.pad([[1, 2, 3]], [[0, 0], [2, 2]], 'REFLECT')     # [[3, 2, 1, 2, 3, 2, 1]]
        tf.pad([[1, 2, 3]], [[0, 0], [2, 2]], 'SYMMETRIC')   # [[2, 1, 1, 2, 3, 3, 2]]

    ``paddings`` must be known when the graph is built (a list or a constant).
    """
    x = convert_to_tensor(tensor)
    attrs = {"paddings": _paddings(paddings), "mode": _mode(mode)}
    if attrs["mode"] == "constant":
        if x.dtype.is_bool and isinstance(constant_values, int) and constant_values == 0:
            constant_values = False     # the default pads a bool tensor too, as in TF
        fill = convert_to_tensor(constant_values, dtype=x.dtype)
        return x.graph.create_op("PadV2", [x, fill], attrs, name=name or "Pad").outputs[0]
    return x.graph.create_op("MirrorPad", [x], attrs, name=name or "MirrorPad").outputs[0]


def _mode(mode):
    upper = str(mode).upper()
    if upper == "CONSTANT":
        return "constant"
    if upper not in _MIRROR_MODES:
        raise ValueError(f"Unknown padding mode: {mode}")
    return _MIRROR_MODES[upper]


def _paddings(paddings):
    pairs = _static_pairs(paddings)
    if any(len(pair) != 2 or min(pair) < 0 for pair in pairs):
        raise ValueError(f"paddings must be a [rank, 2] list of non-negative ints, got "
                         f"{pairs}")
    return tuple(tuple(pair) for pair in pairs)


def _static_pairs(value):
    """[[before, after], ...] from a nested list or a tensor the graph fixes."""
    if hasattr(value, "graph"):
        tensor, value = value, constant_value(value)
        if value is None:
            raise ValueError(f"pad needs static paddings (a list or a constant), got the "
                             f"tensor {tensor.name}")
        value = value.tolist()
    return [static_ints(row, "each row of paddings") for row in value]


# (grad, input) -> the input's part of grad; the mirror modes add the padded
# parts back onto the elements they copied.
register_op("PadGrad", lambda inputs, attrs: [(inputs[1].shape, inputs[0].dtype)],
            shape_only_inputs=(1,))


def _pad_grad(op, grad):
    grad_x = op.graph.create_op("PadGrad", [grad, op.inputs[0]], dict(op.attrs)).outputs[0]
    return [grad_x] + [None] * (len(op.inputs) - 1)


register_gradient("PadV2", _pad_grad)
register_gradient("MirrorPad", _pad_grad)

# -- tile ---------------------------------------------------------------------------


def _tile_shape(inputs, attrs):
    x, multiples = inputs[0], attrs["multiples"]
    return _grown_shape(x, multiples, f"Shape must be rank {len(multiples)} but is rank "
                        f"{x.shape.ndims} for 'Tile' with input shape {x.shape} and "
                        f"multiples {list(multiples)}", lambda dim, times: dim * times)


register_op("Tile", _tile_shape)


def tile(input, multiples, name=None):
    """``input`` repeated ``multiples[d]`` times along each dimension d::

        tf.tile([[1, 2]], [2, 3])     # [[1, 2, 1, 2, 1, 2], [1, 2, 1, 2, 1, 2]]

    ``multiples`` may be a list, a tensor, or a list holding scalar tensors
    (``[tf.shape(y)[0], 1]``). The gradient sums the gradients of the tiles.
    """
    x = convert_to_tensor(input)
    if _known_at_run_time(multiples):
        return _dynamic_tile(x, multiples, name)
    times = _fixed_ints(multiples)
    for axis, count in enumerate(times):
        if count < 0:
            raise ValueError(f"Expected multiples[{axis}] >= 0, but got {count}")
    return x.graph.create_op("Tile", [x], {"multiples": tuple(times)},
                             name=name or "Tile").outputs[0]


register_op("TileGrad", lambda inputs, attrs: [(inputs[1].shape, inputs[0].dtype)],
            shape_only_inputs=(1,))
register_gradient("Tile", lambda op, grad: [op.graph.create_op(
    "TileGrad", [grad, op.inputs[0]], dict(op.attrs)).outputs[0]])


def _known_at_run_time(multiples):
    if isinstance(multiples, core.Tensor):
        return constant_value(multiples) is None
    return any(isinstance(count, core.Tensor) and constant_value(count) is None
               for count in multiples)


def _fixed_ints(multiples):
    """The multiples as ints where the graph fixes them (constants included)."""
    if not isinstance(multiples, core.Tensor):
        multiples = [constant_value(count) if isinstance(count, core.Tensor) else count
                     for count in multiples]
    return static_ints(multiples, "tile's multiples")


def _dynamic_tile_shape(inputs, attrs):
    x, multiples = inputs[0], shape_values.constant_value_as_shape(inputs[1])
    if multiples.dims is None:
        return [(unknown_shape(x.shape.ndims), x.dtype)]
    return _grown_shape(x, multiples.dims, f"Shape must be rank {len(multiples.dims)} but "
                        f"is rank {x.shape.ndims} for 'Tile' with input shape {x.shape}",
                        lambda dim, times: None if times is None else dim * times)


# Multiples known only when the graph runs: read on the host then.
register_op("DynamicTile", _dynamic_tile_shape)
register_op("DynamicTileGrad", lambda inputs, attrs: [(inputs[1].shape, inputs[0].dtype)],
            shape_only_inputs=(1,))
register_gradient("DynamicTile", lambda op, grad: [op.graph.create_op(
    "DynamicTileGrad", [grad, op.inputs[0], op.inputs[1]]).outputs[0], None])


def _dynamic_tile(x, multiples, name):
    from .array_ops import shape_tensor  # it imports constant_ops
    counts = shape_tensor(multiples, "tile")
    return x.graph.create_op("DynamicTile", [x, counts], name=name or "Tile").outputs[0]
