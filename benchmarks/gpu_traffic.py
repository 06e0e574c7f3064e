"""GPU memory traffic and kernel launches of one training step, as a model.

Builds the cifar10 recipe's training step as benchmarks/gpu_peers.py does
(batch 512 by default, float32), takes the ops a Session would run for it,
fuses them as the plan would on a GPU, and counts for every GPU kernel the
global-memory bytes it reads and writes and the kernel launches, under the
generic CuPy kernels ("before": kernels.py and friends run with xp = cupy)
and under the GPU kernels of backends/cupy_conv.py ("after"). Prints a
table by op type and the totals, and writes JSON (default
benchmarks/results/gpu_traffic.json).

    python benchmarks/gpu_traffic.py [--batch 512] [--json FILE]

What it counts (a model: no GPU is needed, none was used):

- every kernel reads each distinct input byte once and writes each output
  byte once: caches are perfect within a kernel and empty between kernels.
  An elementwise ufunc reads its inputs and writes its output; a reduction
  reads its input and writes its result; a copy or gather reads its source
  and writes its destination; a GEMM reads A and B once and writes C once;
  im2col reads the input and writes the patch matrix; col2im reads the
  column matrix and writes dx; a memset writes its array;
- launches: one per ufunc, reduction, copy, memset, GEMM (cuBLAS may split
  one into two) or custom kernel, including the tiny per-channel ones;
- views (reshape, transpose, expand_dims, same-dtype casts), variables,
  constants, feeds and no-ops cost nothing; host-to-device copies of the
  fed batch are not counted;
- the kernels each op runs follow the code paths of the CuPy backend for
  this network's shapes (3x3 stride-1 SAME convolutions, 2x2 max pools,
  training-mode batch norm, Nesterov momentum with weight decay); an op
  type the model does not know counts as one elementwise kernel and is
  listed under "generic rule".

The "after" counts of the new kernels are checked against the kernels
themselves: tests/test_gpu_conv.py runs them on small shapes through a
launcher that counts launches and bytes, and compares with this model.
"""

import argparse
import collections
import math
import os
import platform
import sys
from typing import NamedTuple

import numpy as np

from towerflow import fusion, plan
from towerflow.backends import cupy_conv
from towerflow.backends import gpu_batch_norm_specs as bn_specs
from towerflow.backends.gpu_conv_specs import COL2IM, IM2COL
from towerflow.backends.kernels import build_kernels
from towerflow.backends.window_geometry import _layout
from towerflow.training import write_json

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))     # for gpu_peers


class Kernel(NamedTuple):
    name: str
    read: int       # bytes
    written: int


def tiny(name, count, itemsize=4):
    """A per-channel (or scalar) kernel: ``count`` values in, ``count`` out."""
    return Kernel(name, count * itemsize, count * itemsize)


# -- shapes ------------------------------------------------------------------------------


def dims(tensor):
    return tuple(tensor.shape.as_list())


def itemsize(tensor):
    return np.dtype(tensor.dtype.as_numpy_dtype).itemsize


def nbytes(tensor):
    return math.prod(dims(tensor)) * itemsize(tensor)


def conv_layout(unit):
    x, w = unit.inputs[0], unit.inputs[1]
    (_, height, width, _), (kh, kw, _, _) = dims(x), dims(w)
    (sh, sw), padding = unit.attrs["strides"], unit.attrs["padding"]
    return _layout(height, width, kh, kw, sh, sw, padding)


class Conv(NamedTuple):
    """A convolution's sizes in bytes, from its (x, w) inputs."""
    x: int
    w: int
    y: int
    patches: int
    padded: int
    lay: object
    channels: int
    cells: int          # H * W
    pointwise: bool


def conv_sizes(unit, x_index=0, w_index=1):
    x, w = unit.inputs[x_index], unit.inputs[w_index]
    (n, height, width, channels), (kh, kw, _, out_channels) = dims(x), dims(w)
    (sh, sw), padding = unit.attrs["strides"], unit.attrs["padding"]
    lay = _layout(height, width, kh, kw, sh, sw, padding)
    rows, size = n * lay.out_h * lay.out_w, itemsize(x)
    top, bottom, left, right = lay.pads
    padded = n * (height + top + bottom) * (width + left + right) * channels * size
    return Conv(nbytes(x), nbytes(w), rows * out_channels * size,
                rows * kh * kw * channels * size, padded, lay, channels, height * width,
                (kh, kw, sh, sw) == (1, 1, 1, 1))


def batch_rows(unit, index=0):
    """(rows, channels, itemsize) of an [..., C] input."""
    shape = dims(unit.inputs[index])
    return math.prod(shape[:-1]), shape[-1], itemsize(unit.inputs[index])


# -- before: the generic CuPy kernels ----------------------------------------------------


def conv2d_before(unit):
    conv = conv_sizes(unit)
    if conv.pointwise:
        return [Kernel("gemm", conv.x + conv.w, conv.y)]
    (_, kw), pads = conv.lay.window, any(conv.lay.pads)
    kernels = []
    if pads:        # _pad: a zeroed padded copy, the input copied into it
        kernels += [Kernel("memset", 0, conv.padded), Kernel("copy", conv.x, conv.x)]
    elif kw * conv.channels < conv.lay.out_w:       # channel-major: copied even unpadded
        kernels += [Kernel("copy", conv.x, conv.x)]
    return kernels + [Kernel("gather (im2col)", conv.padded, conv.patches),
                      Kernel("gemm", conv.patches + conv.w, conv.y)]


def conv_filter_grad(unit):
    patches, grad = unit.inputs
    rows = math.prod(dims(grad)[:-1])
    patch_bytes = rows * dims(patches)[1] * itemsize(patches)
    return [Kernel("gemm", patch_bytes + nbytes(grad), nbytes(unit.outputs[0]))]


def conv_input_grad_before(unit):
    conv = conv_sizes(unit)
    grad = nbytes(unit.inputs[2])
    if conv.pointwise:
        return [Kernel("gemm", grad + conv.w, conv.x)]
    lay, (kh, kw) = conv.lay, conv.lay.window
    if kw * conv.channels < lay.out_w:
        return _col2im_channel_major_before(conv, grad)
    tap_w, product = conv.w // (kh * kw), conv.patches // (kh * kw)
    kernels = [Kernel("copy (filter transpose)", conv.w, conv.w)]
    taps = list(lay.taps)
    whole = next((tap for tap in taps if tap.whole), None)
    if whole is None:
        kernels.append(Kernel("memset", 0, conv.x))
    else:
        taps.remove(whole)
        kernels.append(Kernel("gemm", grad + tap_w, conv.x))
    for tap in taps:
        region = tap_region_bytes(tap, conv)
        kernels += [Kernel("gemm", grad + tap_w, product),
                    Kernel("add (tap)", 2 * region, region)]
    return kernels


def tap_region_bytes(tap, conv):
    """Bytes of dx that one tap's strided slice of input cells covers."""
    _, rows, cols = tap.in_index
    cells = len(range(rows.start, rows.stop, rows.step)) * \
        len(range(cols.start, cols.stop, cols.step))
    return cells * (conv.x // conv.cells)


def _col2im_channel_major_before(conv, grad):
    kernels = [Kernel("gemm", conv.w + grad, conv.patches)]
    taps = list(conv.lay.taps)
    whole = next((tap for tap in taps if tap.whole), None)
    if whole is None:
        kernels.append(Kernel("memset", 0, conv.x))
    else:
        taps.remove(whole)
    for tap in taps:
        region = tap_region_bytes(tap, conv)
        kernels.append(Kernel("add (tap)", 2 * region, region))
    return kernels + [Kernel("copy (to NHWC)", conv.x, conv.x)]


def apply_per_channel(name, rows, channels, size):
    """_PerChannel.apply: the vector tiled to a long row, then the ufunc."""
    data = rows * channels * size
    return [tiny("tile", channels, size), Kernel(name, data, data)]


def batch_norm_before(unit):
    rows, channels, size = batch_rows(unit)
    data, vector = rows * channels * size, channels * size
    if unit.attrs.get("is_training") is False:
        return (apply_per_channel("subtract", rows, channels, size) +
                [tiny("add eps", channels, size), tiny("sqrt", channels, size),
                 tiny("reciprocal", channels, size), tiny("scale*inv_std", channels, size)] +
                apply_per_channel("multiply", rows, channels, size) +
                apply_per_channel("add offset", rows, channels, size))
    return ([Kernel("gemm (column sums)", data + rows * size, vector), tiny("mean", channels)] +
            apply_per_channel("subtract mean", rows, channels, size) +
            [Kernel("square", 2 * data, data),
             Kernel("gemm (column sums)", data + rows * size, vector),
             tiny("variance", channels), tiny("unbiased variance", channels),
             tiny("add eps", channels), tiny("sqrt", channels), tiny("reciprocal", channels),
             tiny("scale*inv_std", channels)] +
            apply_per_channel("multiply", rows, channels, size) +
            apply_per_channel("add offset", rows, channels, size))


def batch_norm_grad_before(unit):
    rows, channels, size = batch_rows(unit)
    data, vector = rows * channels * size, channels * size
    sums = Kernel("gemm (column sums)", data + rows * size, vector)
    kernels = (apply_per_channel("subtract mean", rows, channels, size) +
               [sums, Kernel("grad*centered", 2 * data, data), sums,
                tiny("dscale", channels), tiny("gain", channels)] +
               apply_per_channel("grad*gain", rows, channels, size))
    if unit.attrs.get("is_training") is not False:
        kernels += ([tiny("coefficient", channels)] * 3 +
                    apply_per_channel("centered*coefficient", rows, channels, size) +
                    [Kernel("dx+=", 2 * data, data)] +
                    [tiny("coefficient", channels)] * 2 +
                    apply_per_channel("dx-=", rows, channels, size))
    return kernels


def relu_grad_before(unit):
    grad, y = unit.inputs
    elements = math.prod(dims(grad))
    return [Kernel("greater (y > 0)", nbytes(y), elements),
            Kernel("multiply", nbytes(grad) + elements, nbytes(grad))]


def max_pool_before(unit):
    x, (pooled, winners) = unit.inputs[0], unit.outputs
    taps = len(pool_layout(unit, x).taps)
    out, code = nbytes(pooled), nbytes(winners)
    kernels = [Kernel("maximum", 2 * out, out)] + [Kernel("maximum", 2 * out, out)] * (taps - 2)
    kernels.append(Kernel("memset", 0, code))
    for position in range(taps):
        if position:
            kernels.append(Kernel("add (code doubling)", code, code))
        kernels += [Kernel("equal", 2 * out, code), Kernel("add (hit)", 2 * code, code)]
    return kernels


def pool_layout(unit, x):
    (_, height, width, _), attrs = dims(x), unit.attrs
    (kh, kw), (sh, sw) = attrs["ksize"], attrs["strides"]
    return _layout(height, width, kh, kw, sh, sw, attrs["padding"])


def max_pool_grad_before(unit, masked=False):
    x, winners, grad = unit.inputs[:3]
    lay = pool_layout(unit, x)
    out, code, dx = nbytes(grad), nbytes(winners), nbytes(x)
    exact = lay.tiles and (lay.out_h * lay.window[0], lay.out_w * lay.window[1]) == dims(x)[1:3]
    kernels = [] if exact else [Kernel("memset", 0, dx)]
    if masked:      # block * (relu_output > 0)
        kernels += [Kernel("greater", out, code), Kernel("multiply", out + code, out)]
    kernels += [Kernel("negative", code, code), Kernel("bitwise_and", 2 * code, code)]
    for _ in lay.taps:
        kernels += [Kernel("equal", code, code), Kernel("where", code + out, out),
                    Kernel("copy" if exact else "add", out if exact else 2 * out, out)]
    return kernels


def momentum_before(unit):
    var_bytes = nbytes(unit.inputs[1])      # (learning_rate, grad, momentum)
    kernels = []
    if unit.attrs.get("weight_decay"):
        kernels += [tiny("lr*wd", 1), tiny("1-lr*wd", 1),
                    Kernel("decay", var_bytes, var_bytes)]
    return kernels + [Kernel("fused momentum", 3 * var_bytes, 2 * var_bytes)]


def add_n(unit):
    out = nbytes(unit.outputs[0])
    return [Kernel("add", 2 * out, out)] * (len(unit.inputs) - 1)


def extremum_grad(unit):
    grad, x, _ = unit.inputs
    elements, out = math.prod(dims(x)), nbytes(unit.outputs[0])
    return [Kernel("equal", nbytes(x) + nbytes(grad), elements),
            Kernel("sum", elements, nbytes(grad) * 2), tiny("astype", math.prod(dims(grad))),
            Kernel("multiply", nbytes(grad) + elements, out),
            Kernel("divide", out + nbytes(grad), out)]


def cross_entropy(unit):
    logits = nbytes(unit.inputs[0])
    rows = dims(unit.inputs[0])[0]
    return ([tiny("labels min/max", rows, 8)] * 2 + [tiny("arange", rows, 8)] +
            [Kernel(name, logits, logits) for name in
             ("max", "subtract", "exp", "sum", "divide", "log", "subtract")] +
            [tiny("gather loss", rows), tiny("gather", rows), tiny("subtract 1", rows),
             tiny("scatter", rows)])


def elementwise_rule(unit):
    return [Kernel("elementwise", sum(nbytes(t) for t in unit.inputs),
                   sum(nbytes(t) for t in unit.outputs))]


def nothing(unit):
    return []


def cast(unit):
    same = unit.inputs[0].dtype == unit.outputs[0].dtype
    return [] if same else elementwise_rule(unit)


FREE = ("VariableV2", "Identity", "Const", "NoOp", "Placeholder", "ExpandDims", "Reshape",
        "Squeeze", "ReadVariable", "StopGradient", "ReshapeLike")

BEFORE = {
    **{name: nothing for name in FREE},
    "Cast": cast,
    "Conv2D": conv2d_before, "Conv2DBackpropFilter": conv_filter_grad,
    "Conv2DBackpropInput": conv_input_grad_before,
    "FusedBatchNorm": batch_norm_before, "FusedBatchNormGrad": batch_norm_grad_before,
    "Relu": elementwise_rule, "ReluGrad": relu_grad_before,
    "MaxPool": max_pool_before, "MaxPoolGrad": max_pool_grad_before,
    "_MaxPoolGradRelu": lambda unit: max_pool_grad_before(unit, masked=True),
    "ApplyMomentum": momentum_before, "AddN": add_n,
    "MatMul": lambda unit: [Kernel("gemm", nbytes(unit.inputs[0]) + nbytes(unit.inputs[1]),
                                   nbytes(unit.outputs[0]))],
    "Max": elementwise_rule, "Add": elementwise_rule, "Sub": elementwise_rule,
    "Mul": elementwise_rule, "AssignSub": elementwise_rule,
    "ReduceExtremumGrad": extremum_grad,
    "ReductionGrad": lambda unit: [tiny("scale", 1), Kernel("fill", 4, nbytes(unit.outputs[0]))],
    "SparseSoftmaxCrossEntropyWithLogits": cross_entropy,
}


# -- after: backends/cupy_conv.py --------------------------------------------------------


def conv2d_after(unit):
    conv = conv_sizes(unit)
    if conv.pointwise:
        return [Kernel("gemm", conv.x + conv.w, conv.y)]
    return [Kernel(IM2COL.name, conv.x, conv.patches),
            Kernel("gemm", conv.patches + conv.w, conv.y)]


def conv_input_grad_after(unit):
    conv = conv_sizes(unit)
    grad = nbytes(unit.inputs[2])
    if conv.pointwise:
        return [Kernel("gemm", grad + conv.w, conv.x)]
    return [Kernel("gemm", grad + conv.w, conv.patches),
            Kernel(COL2IM.name, conv.patches, conv.x)]


def batch_norm_after(unit, relu=False):
    """Training, or a fed flag (the recipe's: the finish kernel reads it and
    the given mean and variance, and selects on the device)."""
    if unit.attrs.get("is_training") is False:
        return batch_norm_before(unit) + ([Kernel("maximum", 0, 0)] if relu else [])
    rows, channels, size = batch_rows(unit)
    data, vector = rows * channels * size, channels * size
    partials = 2 * bn_specs.partial_blocks(rows)[0] * vector
    apply = bn_specs.BN_APPLY_RELU if relu else bn_specs.BN_APPLY
    finish = Kernel(bn_specs.BN_STATS_FINISH.name, partials + 2 * vector, 4 * vector) \
        if unit.attrs.get("is_training") else \
        Kernel(bn_specs.BN_STATS_FINISH_FED.name, partials + 4 * vector + 1, 4 * vector)
    return [Kernel(bn_specs.BN_STATS_PARTIALS.name, data + vector, partials), finish,
            Kernel(apply.name, data + 3 * vector, data)]


def batch_norm_grad_after(unit, masked=False):
    rows, channels, size = batch_rows(unit)
    data, vector = rows * channels * size, channels * size
    partials = 2 * bn_specs.partial_blocks(rows)[0] * vector
    arrays = 3 if masked else 2
    apply = bn_specs.BN_GRAD_APPLY_MASKED if masked else bn_specs.BN_GRAD_APPLY
    finish = Kernel(bn_specs.BN_GRAD_FINISH.name, partials + 2 * vector, 5 * vector) \
        if unit.attrs.get("is_training") is not None else \
        Kernel(bn_specs.BN_GRAD_FINISH_FED.name, partials + 2 * vector + 1, 5 * vector)
    return [Kernel(bn_specs.BN_GRAD_PARTIALS.name, arrays * data + vector, partials), finish,
            Kernel(apply.name, arrays * data + 4 * vector, data)]


AFTER = {
    **BEFORE,
    "Conv2D": conv2d_after, "Conv2DBackpropInput": conv_input_grad_after,
    "FusedBatchNorm": batch_norm_after,
    "_FusedBatchNormRelu": lambda unit: batch_norm_after(unit, relu=True),
    "FusedBatchNormGrad": batch_norm_grad_after,
    "_ReluGradBatchNormGrad": lambda unit: batch_norm_grad_after(unit, masked=True),
}


# -- the step ----------------------------------------------------------------------------


def step_ops(batch):
    """(ops in run order, targets, feeds) of the training step's plan."""
    from gpu_peers import build_training_step
    _, x, labels, _, train_op, _, _ = build_training_step(batch, "float32", "/gpu:0")
    targets, feeds = [train_op], [x, labels]
    return plan._needed_ops(targets, feeds), targets, feeds


def gpu_units(ops, targets, feeds, kernel_names):
    """The units (ops and fused chains) a GPU plan runs for ``ops`` when the
    GPU's kernel table has ``kernel_names``."""
    return fusion.fuse(ops, targets, feeds, lambda op: "GPU", lambda device: kernel_names)


def step_units(batch, kernel_names):
    return gpu_units(*step_ops(batch), kernel_names)


def count(units, costs):
    """{unit type: {'units', 'launches', 'read', 'written'}} and the op types
    counted by the generic rule."""
    table, generic = collections.defaultdict(collections.Counter), set()
    for unit in units:
        rule = costs.get(unit.type)
        if rule is None:
            generic.add(unit.type)
            rule = elementwise_rule
        kernels = rule(unit)
        row = table[unit.type]
        row.update(units=1, launches=len(kernels), read=sum(k.read for k in kernels),
                   written=sum(k.written for k in kernels))
    return {name: dict(row) for name, row in table.items()}, sorted(generic)


def totals(table):
    return {key: sum(row.get(key, 0) for row in table.values())
            for key in ("launches", "read", "written")}


def model(batch):
    """Before and after counts for the training step at ``batch``."""
    names = set(build_kernels(np))
    before, generic_before = count(step_units(batch, names), BEFORE)
    after, generic_after = count(step_units(batch, names | set(cupy_conv.FUSED_KERNELS)),
                                 AFTER)
    return {"before": before, "after": after, "totals": {
        "before": totals(before), "after": totals(after)},
        "generic_rule": sorted(set(generic_before) | set(generic_after))}


GB = 1e9


def print_table(result, batch):
    before, after = result["before"], result["after"]
    print(f"\ncifar10 training step, batch {batch}, float32: GB read+written and launches")
    print(f"{'op type':<40}{'before GB':>10}{'after GB':>10}{'before n':>10}{'after n':>9}")
    rows = sorted(set(before) | set(after),
                  key=lambda name: -_bytes(before.get(name, {})))
    for name in rows:
        old, new = before.get(name, {}), after.get(name, {})
        if not old.get("launches") and not new.get("launches"):
            continue
        label = f"{name} x{old.get('units') or new.get('units')}"
        print(f"{label:<40}{_bytes(old) / GB:>10.3f}{_bytes(new) / GB:>10.3f}"
              f"{old.get('launches', 0):>10}{new.get('launches', 0):>9}")
    old, new = result["totals"]["before"], result["totals"]["after"]
    print(f"{'total':<40}{_bytes(old) / GB:>10.3f}{_bytes(new) / GB:>10.3f}"
          f"{old['launches']:>10}{new['launches']:>9}")
    if result["generic_rule"]:
        print(f"generic rule (one elementwise kernel): {', '.join(result['generic_rule'])}")


def _bytes(row):
    return row.get("read", 0) + row.get("written", 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results",
                                                       "gpu_traffic.json"))
    args = parser.parse_args()
    result = model(args.batch)
    print_table(result, args.batch)
    result.update(benchmark="gpu_traffic", batch=args.batch, precision="float32",
                  model=True, numpy=np.__version__, python=platform.python_version())
    write_json(args.json, result)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
