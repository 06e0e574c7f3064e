"""``tf.einsum`` and ``tf.tensordot``. The equation is parsed and checked as
TF 1.15's einsum parses it (an ellipsis resolved to letters, the implicit
output of the labels seen once, an axis appearing twice in one input
refused except for the trace ``'ii'``); the contraction then runs as one
Einsum op, NumPy's (CuPy's) einsum, whose gradient for each operand is the
einsum of the output's gradient with the other operands::

    c = tf.einsum('ij,jk->ik', a, b)
    d = tf.tensordot(a, b, axes=[[1], [0]])
"""

import re
import string

from ..graph.registry import register_gradient, register_op
from ..graph.shapes import TensorShape
from .constant_ops import convert_to_tensor


def _einsum_shape(inputs, attrs):
    in_labels, out_labels = attrs["inputs"], attrs["output"]
    sizes = {}
    for tensor, labels in zip(inputs, in_labels):
        dims = tensor.shape.dims or [None] * len(labels)
        if len(dims) != len(labels):
            raise ValueError(f"Tensor of rank {len(dims)} does not match einsum subscripts "
                             f"'{labels}' of length {len(labels)}")
        for label, dim in zip(labels, dims):
            _merge_size(sizes, label, dim, attrs["equation"])
    if any(tensor.dtype is not inputs[0].dtype for tensor in inputs):
        raise TypeError("einsum inputs must share a dtype, got " +
                        ", ".join(tensor.dtype.name for tensor in inputs))
    return [(TensorShape([sizes.get(label) for label in out_labels]), inputs[0].dtype)]


def _merge_size(sizes, label, dim, equation):
    known = sizes.get(label)
    if dim is not None and known is not None and dim != known:
        raise ValueError(f"Dimensions of label '{label}' do not match in einsum "
                         f"'{equation}': {known} vs. {dim}")
    sizes[label] = known if dim is None else dim


register_op("Einsum", _einsum_shape, exact_gradients=True)
# (grad, *operands) -> the gradient of operand attrs["index"]
register_op("EinsumGrad", lambda inputs, attrs: [
    (inputs[1 + attrs["index"]].shape, inputs[0].dtype)])


def _einsum_grad(op, grad):
    attrs = {key: op.attrs[key] for key in ("inputs", "output", "equation")}
    return [op.graph.create_op("EinsumGrad", [grad, *op.inputs], {**attrs, "index": index})
            .outputs[0] for index in range(len(op.inputs))]


register_gradient("Einsum", _einsum_grad)


def einsum(equation, *inputs, **kwargs):
    """The Einstein summation of ``inputs`` that ``equation`` writes, as NumPy's
    ``einsum``::

        tf.einsum('ij,jk->ik', a, b)        # matmul
        tf.einsum('...ij,...jk->...ik', u, v)
        tf.einsum('ii', m)                  # trace
    """
    name = kwargs.pop("name", None)
    if kwargs:
        raise TypeError("invalid keyword arguments for this function: " +
                        ", ".join(sorted(kwargs)))
    inputs = [convert_to_tensor(each) for each in inputs]
    in_labels, out_labels = parse_equation(equation, [x.shape for x in inputs])
    _check_repeats(equation, in_labels)
    if set(out_labels) - set("".join(in_labels)) or len(set(out_labels)) < len(out_labels):
        raise ValueError(f"Invalid equation: {equation}")
    attrs = {"inputs": tuple(in_labels), "output": out_labels, "equation": equation}
    return inputs[0].graph.create_op("Einsum", inputs, attrs,
                                     name=name or "einsum").outputs[0]


def _check_repeats(equation, in_labels):
    """TF 1.15 refuses an axis twice in one input, but for one input's trace
    ('ii', no '->')."""
    for labels in in_labels:
        if len(set(labels)) == len(labels):
            continue
        trace = (len(in_labels) == 1 and len(labels) == 2 and "->" not in equation)
        if not trace:
            raise ValueError("Subscript not supported: an axis appears more than once: "
                             f"{labels}")


def parse_equation(equation, shapes):
    """(input labels, output labels) with the ellipsis resolved, as TF 1.15's
    _einsum_v1_parse_and_resolve_equation."""
    equation = equation.replace(" ", "")
    match = re.match(r"^([a-zA-Z,.]+)(->[a-zA-Z.]*)?$", equation)
    if not match:
        raise ValueError(f"Indices have incorrect format: {equation}")
    in_labels = match.group(1).split(",")
    out_labels = match.group(2)[2:] if match.group(2) else None
    if len(shapes) != len(in_labels):
        raise ValueError(f'Got {len(shapes)} arguments for equation "{equation}", '
                         f"expecting {len(in_labels)}")
    ellipsis_labels = ""
    if "..." in equation:
        in_labels, ellipsis_labels = _resolve_ellipsis(in_labels, shapes)
        if out_labels is not None:
            out_labels = out_labels.replace("...", ellipsis_labels)
            if "." in out_labels:
                raise ValueError('period "." found outside of ellipsis')
    if out_labels is None:
        counts = {}
        for labels in in_labels:
            for label in labels:
                counts[label] = counts.get(label, 0) + 1
        out_labels = ellipsis_labels + "".join(sorted(
            label for label, count in counts.items()
            if count == 1 and label not in ellipsis_labels))
    return in_labels, out_labels


def _resolve_ellipsis(in_labels, shapes):
    unused = "".join(c for c in string.ascii_letters if c not in "".join(in_labels))
    resolved, widest = [], ""
    for labels, shape in zip(in_labels, shapes):
        if "..." in labels:
            parts = labels.split("...")
            if len(parts) != 2:
                raise ValueError("Unable to resolve ellipsis. Excess number found.")
            if shape.ndims is None:
                raise ValueError("Unable to statically infer ellipsis axes.")
            count = shape.ndims - len("".join(parts))
            if count < 0:
                raise ValueError("Ellipses lengths do not match.")
            if len(unused) < count:
                raise ValueError("Unable to resolve ellipsis, too many distinct labels.")
            replacement = unused[-count:] if count > 0 else ""
            labels = labels.replace("...", replacement)
            widest = replacement if len(replacement) > len(widest) else widest
        if "." in labels:
            raise ValueError('period "." found outside of ellipsis')
        resolved.append(labels)
    return resolved, widest


def tensordot(a, b, axes, name=None):
    """The sum of products of ``a``'s and ``b``'s elements over the axes
    ``axes`` pairs: an int N (a's last N with b's first N) or two lists::

        tf.tensordot(a, b, 1)              # matmul for matrices
        tf.tensordot(a, b, [[1, 2], [0, 1]])
    """
    a, b = convert_to_tensor(a, name="a"), convert_to_tensor(b, name="b")
    if a.shape.ndims is None or b.shape.ndims is None:
        raise ValueError("tensordot needs the ranks of a and b known when the graph is built")
    a_axes, b_axes = _tensordot_axes(axes, a.shape.ndims, b.shape.ndims)
    letters = iter(string.ascii_letters)
    a_labels = [next(letters) for _ in range(a.shape.ndims)]
    b_labels = [next(letters) for _ in range(b.shape.ndims)]
    for a_axis, b_axis in zip(a_axes, b_axes):
        b_labels[b_axis] = a_labels[a_axis]
    out = [label for axis, label in enumerate(a_labels) if axis not in a_axes] + \
        [label for axis, label in enumerate(b_labels) if axis not in b_axes]
    equation = f"{''.join(a_labels)},{''.join(b_labels)}->{''.join(out)}"
    return einsum(equation, a, b, name=name or "Tensordot")


def _tensordot_axes(axes, a_rank, b_rank):
    """TF's _tensordot_axes: an int N, or a pair of axis lists (or ints)."""
    if isinstance(axes, int):
        if axes < 0:
            raise ValueError("'axes' must be at least 0.")
        if axes > a_rank:
            raise ValueError(f"'axes' must not be larger than the number of dimensions of "
                             f"tensor {a_rank}.")
        return list(range(a_rank - axes, a_rank)), list(range(axes))
    axes = list(axes)
    if len(axes) != 2:
        raise ValueError(f"'axes' must be an integer or have length 2, got {axes!r}")
    a_axes, b_axes = ([each] if isinstance(each, int) else list(each) for each in axes)
    if len(a_axes) != len(b_axes):
        raise ValueError(f"Different number of contraction axes 'a' and 'b', "
                         f"{len(a_axes)} != {len(b_axes)}.")
    return ([axis % a_rank for axis in a_axes], [axis % b_rank for axis in b_axes])
