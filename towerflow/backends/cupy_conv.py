"""GPU kernels for convolutions and batch norm: one pass over memory per
kernel where the generic CuPy path of kernels.py makes many.

NOTE: written and checked on a machine without a GPU. Every CUDA kernel here
compiles with NVRTC, and its CUDA C, run on the CPU by the CUDA emulation
(towerflow/simgpu/cuda_emulation.py: the launch's grid, block and argument
types, real barriers, every access checked, also under AddressSanitizer),
matches the NumPy kernels, as its NumPy reference does
(tests/test_gpu_conv.py); the kernels themselves have not run on a GPU.

Design. benchmarks/gpu_traffic.py counts the cifar10 recipe's training
step (batch 512, float32): 17.7 GB read and written in 675 launches with
the generic CuPy kernels, 10.0 GB in 347 with these (README, *GPUs*).

- **Convolution: one-pass im2col + cuBLAS GEMM.** ``towerflow_im2col``
  writes the [N*OH*OW, KH*KW*C] patch matrix in one pass over the input
  (the generic path zero-fills a padded copy, copies the input into it,
  then gathers); one GEMM multiplies it by the filter, and Conv2D keeps the
  patches for the filter gradient (one GEMM). The input gradient is one
  GEMM into the [N*OH*OW, KH*KW*C] column matrix and one ``towerflow_col2im``
  pass that sums, for each input cell, the columns that read it (a gather:
  no atomics, a fixed order); the generic path ran 9 GEMMs and 8 strided
  adds for a 3x3 filter.
  Why not an implicit GEMM (the patches never written, as cuDNN does): by
  the same count the step would move 4.4 GB instead of 10.0, but a
  hand-written kernel runs on the FP32 cores, not the tensor cores cuBLAS
  uses under TF32 (on an H100/H200 about 67 against about 495 TFLOP/s):
  the ~82 GFLOP of the step's convolutions would take at least 1.2 ms at
  the FP32 peak, about what the 5.5 GB saved cost (1.3 ms at 4.3 TB/s), and
  a kernel that cannot be tuned, or even run, without a GPU would be far
  from that peak. cuDNN through ``nvidia-cudnn-frontend`` would give both; it installs
  from PyPI (1.32.0, 11.6 MB) but needs the cuDNN library, CUTLASS DSL and
  TVM-FFI wheels beside CuPy, builds its own graphs and handles, and none
  of it can be checked without a GPU.
- **Batch norm (+ ReLU): three launches each way**, statistics in one pass
  (see gpu_batch_norm_specs.py), the ReLU applied, and its gradient
  masked, in the same elementwise pass (the fusion chains
  ``_FusedBatchNormRelu`` and ``_ReluGradBatchNormGrad`` of fusion.py,
  which form only where the device's table has these kernels: GPUs).

Which kernels run (everything else goes to the generic kernels, unchanged):
float32 and float64 arrays, non-empty, training-mode batch norm; im2col also
takes float16 (it moves bits). The generic kernels still serve float16
convolutions' input gradient and mixed-precision batch norm.

``gpu_kernels(xp, table, launcher)`` returns the makers that replace the
table's; the launcher runs the specs: :class:`CupyLauncher` on a GPU,
:class:`ReferenceLauncher` (their NumPy references) or :class:`EmulatedLauncher`
(their CUDA C on the CPU) in tests::

    table = kernels.build_kernels(np)
    table.update(gpu_kernels(np, table, ReferenceLauncher()))
"""

import os

import numpy as np

from . import gpu_batch_norm_specs as bn_specs
from . import gpu_implicit_gemm_specs as implicit_specs
from . import output_used
from .fused_kernels import batch_norm_chain_kernels
from .gpu_conv_specs import BLOCK, COL2IM, IM2COL, geometry_args
from .kernel_specs import FLOAT_TYPES
from .nn_kernels import sized_backprop_input
from .window_geometry import _layout_maker

# The fusion chains these kernels serve (see towerflow.fusion).
FUSED_KERNELS = ("_FusedBatchNormRelu", "_ReluGradBatchNormGrad")
# Convolutions by implicit GEMM (gpu_implicit_gemm_specs.py) instead of
# im2col + cuBLAS: off until a GPU has measured it (read when a plan makes its
# kernels, as the other fast-path switches are).
CONV_SWITCH = "TOWERFLOW_GPU_CONV"
CONV_PATHS = ("im2col", "implicit")


def implicit_gemm_on():
    """Whether TOWERFLOW_GPU_CONV asks for the implicit-GEMM convolutions."""
    path = os.environ.get(CONV_SWITCH, "im2col")
    if path not in CONV_PATHS:
        raise ValueError(f"{CONV_SWITCH}={path!r}: expected one of {', '.join(CONV_PATHS)}")
    return path == "implicit"


class CupyLauncher:
    """Runs kernel specs as CuPy kernels on the current device and stream,
    each built once per spec and element type."""

    def __init__(self):
        self._built = {}

    def raw(self, spec, grid, block, **args):
        dtype = spec.array_dtype(args)
        kernel = self._built.get((spec.name, dtype))
        if kernel is None:
            kernel = self._built[(spec.name, dtype)] = self.raw_kernel(spec, dtype)
        kernel(_dims(grid), _dims(block), tuple(spec.ordered_args(args, dtype)))

    def elementwise(self, spec, *arrays):
        kernel = self._built.get(spec.name)
        if kernel is None:
            kernel = self._built[spec.name] = self.elementwise_kernel(spec)
        kernel(*arrays)

    def raw_kernel(self, spec, dtype):
        return spec.kernel(dtype)

    def elementwise_kernel(self, spec):
        return spec.kernel()

    def gemm(self, a, b):
        import cupy
        return cupy.matmul(a, b)


class EmulatedLauncher(CupyLauncher):
    """CupyLauncher's launches, NumPy arrays in, each kernel's CUDA C run on
    the CPU (towerflow.simgpu.cuda_emulation): the grid, block and argument
    types are the ones a GPU would get. ``reverse`` runs each block's threads
    last to first."""

    def __init__(self, reverse=False):
        super().__init__()
        self.reverse = reverse

    def raw_kernel(self, spec, dtype):
        from towerflow.simgpu import cuda_emulation
        return cuda_emulation.RawKernel(spec.source(dtype), spec.name, self.reverse)

    def elementwise_kernel(self, spec):
        from towerflow.simgpu import cuda_elementwise
        return cuda_elementwise.ElementwiseKernel(spec.in_params, spec.out_params,
                                                  spec.operation, spec.name)

    def gemm(self, a, b):
        return np.matmul(a, b)


def _dims(size):
    """A launch's grid or block as RawKernel takes it: a tuple of 1 to 3 ints."""
    return tuple(size) if isinstance(size, tuple) else (size,)


class ReferenceLauncher:
    """Runs kernel specs by their NumPy references (NumPy arrays)."""

    def raw(self, spec, grid, block, **args):
        spec.run_reference(**args)

    def elementwise(self, spec, *arrays):
        spec.run_reference(*arrays)

    def gemm(self, a, b):
        return np.matmul(a, b)


def _takes(*arrays):
    """Whether these kernels take the arrays: all float32 or all float64, none empty."""
    dtype = arrays[0].dtype
    return dtype in FLOAT_TYPES and all(array.dtype == dtype and array.size
                                        for array in arrays)


# -- convolution -----------------------------------------------------------------------


def im2col(launcher, xp, x, lay):
    """The [N*OH*OW, KH*KW*C] patch matrix of ``x`` under layout ``lay`` (``x``
    itself, reshaped, for a 1x1 window at stride 1)::

        lay = window_geometry._layout(32, 32, 3, 3, 1, 1, "SAME")
        patches = im2col(CupyLauncher(), cupy, x, lay)    # x [N, 32, 32, C]
    """
    (n, _, _, channels), (kh, kw) = x.shape, lay.window
    if (kh, kw) + tuple(lay.strides) == (1, 1, 1, 1):
        return x.reshape(-1, channels)
    patches = xp.empty((n * lay.out_h * lay.out_w, kh * kw * channels), x.dtype)
    if patches.size:
        launcher.raw(IM2COL, n * lay.out_h, BLOCK, x=xp.ascontiguousarray(x),
                     patches=patches, **geometry_args(x.shape, lay))
    return patches


def col2im(launcher, xp, columns, x_shape, lay):
    """dx [N, H, W, C] from the [N*OH*OW, KH*KW*C] column gradients::

        columns = launcher.gemm(grad2d, w2d.T)            # dpatches
        dx = col2im(launcher, cupy, columns, x.shape, lay)
    """
    dx = xp.empty(x_shape, columns.dtype)
    if dx.size:
        launcher.raw(COL2IM, x_shape[0] * x_shape[1], BLOCK, columns=columns, dx=dx,
                     **geometry_args(x_shape, lay))
    return dx


# -- convolution by implicit GEMM ------------------------------------------------------------


def implicit_conv(launcher, xp, x, w, lay):
    """y [N, OH, OW, O] = conv(x, w) with no patch matrix::

        y = implicit_conv(CupyLauncher(), cupy, x, w, _layout(32, 32, 3, 3, 1, 1, "SAME"))
    """
    out_channels = w.shape[3]
    rows = x.shape[0] * lay.out_h * lay.out_w
    y = xp.empty((rows, out_channels), x.dtype)
    if y.size:
        launcher.raw(implicit_specs.IMPLICIT_CONV, implicit_specs.grid(rows, out_channels),
                     implicit_specs.THREADS, x=xp.ascontiguousarray(x),
                     w=xp.ascontiguousarray(w), y=y, rows=rows,
                     **_implicit_geometry(x.shape, w.shape, lay))
    return y.reshape(x.shape[0], lay.out_h, lay.out_w, out_channels)


def implicit_input_grad(launcher, xp, x_shape, w, grad, lay):
    """dx [N, H, W, C] from grad [N, OH, OW, O], with no column matrix."""
    rows, channels = int(np.prod(x_shape[:3])), x_shape[3]
    dx = xp.empty((rows, channels), grad.dtype)
    if dx.size:
        launcher.raw(implicit_specs.IMPLICIT_INPUT_GRAD, implicit_specs.grid(rows, channels),
                     implicit_specs.THREADS, grad=xp.ascontiguousarray(grad),
                     w=xp.ascontiguousarray(w), dx=dx, rows=rows,
                     **_implicit_geometry(x_shape, w.shape, lay))
    return dx.reshape(x_shape)


def implicit_filter_grad(launcher, xp, x, grad, filter_shape, lay):
    """dw [KH, KW, C, O] from x and grad, with no patch matrix: partial sums
    over splits of the outputs, then added in split order."""
    rows, out_channels = int(np.prod(filter_shape[:3])), filter_shape[3]
    outputs = grad.size // out_channels
    splits, per_split = implicit_specs.filter_grad_splits(outputs)
    partials = xp.empty((splits, rows, out_channels), grad.dtype)
    dw = xp.empty(filter_shape, grad.dtype)
    if outputs == 0:
        dw[...] = 0
        return dw
    launcher.raw(implicit_specs.IMPLICIT_FILTER_GRAD_PARTIALS,
                 implicit_specs.grid(rows, out_channels, splits), implicit_specs.THREADS,
                 x=xp.ascontiguousarray(x), grad=xp.ascontiguousarray(grad),
                 partials=partials, rows=rows, outputs=outputs, per_split=per_split,
                 **_implicit_geometry(x.shape, filter_shape, lay))
    count = rows * out_channels
    launcher.raw(implicit_specs.IMPLICIT_FILTER_GRAD_FINISH,
                 -(-count // implicit_specs.THREADS), implicit_specs.THREADS,
                 partials=partials, dw=dw, splits=splits, count=count)
    return dw


def _implicit_geometry(x_shape, w_shape, lay):
    return {**geometry_args(x_shape, lay), "out_channels": w_shape[3]}


def _implicit_conv_kernels(xp, table, launcher):
    """Conv2D, its gradients and its Conv2DBackpropFilter by implicit GEMM;
    ``table``'s makers for what they do not take (float16: im2col's).
    Conv2D's second output, which the filter gradient reads, is x itself
    (4-D, where the im2col path gives 2-D patches)."""
    def conv2d(ctx):
        generic, layout_of = table["Conv2D"](ctx), _layout_maker(ctx.attrs)

        def conv(x, w):
            if not _takes(x, w):
                return generic(x, w)
            return implicit_conv(launcher, xp, x, w, layout_of(x.shape, w.shape[:2])), x
        return conv

    def backprop_filter(ctx):
        generic, attrs = table["Conv2DBackpropFilter"](ctx), ctx.attrs
        filter_shape = tuple(attrs["filter_shape"])

        def grad_filter(patches_or_x, grad):
            if patches_or_x.ndim != 4:          # patches: an im2col Conv2D's
                return generic(patches_or_x, grad)
            # NOTE: the windows' strides and padding come with the op (conv_ops.py)
            lay = _layout_maker(attrs)(patches_or_x.shape, filter_shape[:2])
            return implicit_filter_grad(launcher, xp, patches_or_x, grad, filter_shape, lay)
        return grad_filter

    return {"Conv2D": conv2d, "Conv2DBackpropFilter": backprop_filter,
            "Conv2DBackpropInput": _input_grad_maker(
                table, lambda *args: implicit_input_grad(launcher, xp, *args))}


def _input_grad_maker(table, input_grad):
    """Conv2DBackpropInput's maker (both its forms): ``input_grad(x_shape, w,
    grad, lay)`` where these kernels take w and grad, ``table``'s elsewhere."""
    def make(ctx):
        generic, layout_of = table["Conv2DBackpropInput"](ctx), _layout_maker(ctx.attrs)

        def grad_input(x, w, grad):
            if not _takes(w, grad):
                return generic(x, w, grad)
            x_shape = tuple(x.shape)
            return input_grad(x_shape, w, grad, layout_of(x_shape, w.shape[:2]))
        return sized_backprop_input(ctx, grad_input)
    return make


def im2col_input_grad(launcher, xp, x_shape, w, grad, lay):
    """dx [N, H, W, C]: one GEMM into the column matrix, then col2im (a 1x1
    window at stride 1 is the GEMM alone)."""
    kh, kw, channels, out_channels = w.shape
    grad2d = grad.reshape(-1, out_channels)
    columns = launcher.gemm(grad2d, w.reshape(kh * kw * channels, out_channels).T)
    if (kh, kw) + tuple(lay.strides) == (1, 1, 1, 1):
        return columns.reshape(x_shape)
    return col2im(launcher, xp, columns, x_shape, lay)


# -- convolution by im2col + GEMM ---------------------------------------------------------------


def _conv_kernels(xp, table, launcher):
    """The convolution makers: each asks TOWERFLOW_GPU_CONV which path's
    kernel to make when a plan makes it (the backend's table is built once)."""
    im2col = _im2col_conv_kernels(xp, table, launcher)
    paths = {"im2col": im2col,
             "implicit": _implicit_conv_kernels(xp, {**table, **im2col}, launcher)}

    def switched(name):
        def make(ctx):
            makers = paths["implicit" if implicit_gemm_on() else "im2col"]
            return makers.get(name, table[name])(ctx)
        return make
    return {name: switched(name) for name in ("Conv2D", "Conv2DBackpropInput")} | {
        # takes either path's Conv2D output: x (implicit) or patches (im2col)
        "Conv2DBackpropFilter": paths["implicit"]["Conv2DBackpropFilter"]}


def _im2col_conv_kernels(xp, table, launcher):
    def conv2d(ctx):
        generic, layout_of = table["Conv2D"](ctx), _layout_maker(ctx.attrs)
        if not output_used(ctx, 1):
            # NOTE: nothing keeps the patches (inference): the generic kernel
            # never holds the whole patch matrix (about 1.2 GB a layer at 512).
            return generic

        def conv(x, w):
            if not (_takes(x, w) or _takes_bits(x, w)):
                return generic(x, w)
            kh, kw, channels, out_channels = w.shape
            lay = layout_of(x.shape, (kh, kw))
            patches = im2col(launcher, xp, x, lay)
            y = launcher.gemm(patches, w.reshape(kh * kw * channels, out_channels))
            return y.reshape(x.shape[0], lay.out_h, lay.out_w, out_channels), patches
        return conv

    return {"Conv2D": conv2d, "Conv2DBackpropInput": _input_grad_maker(
        table, lambda *args: im2col_input_grad(launcher, xp, *args))}


def _takes_bits(x, w):
    """im2col moves bits: float16 convolutions take it too (cuBLAS does the GEMM)."""
    return x.dtype == w.dtype == np.float16 and x.size > 0 and w.size > 0


# -- batch norm ------------------------------------------------------------------------


def _rows(xp, x):
    """``x`` as C-contiguous [R, C] rows."""
    return xp.ascontiguousarray(x).reshape(-1, x.shape[-1])


def batch_norm_training(launcher, xp, x, scale, offset, epsilon, relu, fed=None):
    """FusedBatchNorm in training (then ReLU if ``relu``): (y, batch mean,
    unbiased batch variance, saved mean, saved inv_std). With ``fed`` (the
    fed flag, a bool array on the device, and the given mean and variance)
    the flag picks, on the device, the batch's statistics or the given ones::

        y, mean, variance, _, inv_std = batch_norm_training(
            ReferenceLauncher(), np, x, scale, offset, 1e-3, relu=True)
    """
    rows2d = _rows(xp, x)
    rows, channels = rows2d.shape
    blocks, rows_per_block = bn_specs.partial_blocks(rows)
    first, second = (xp.empty((blocks, channels), x.dtype) for _ in range(2))
    shift = rows2d[0]
    launcher.raw(bn_specs.BN_STATS_PARTIALS, blocks, bn_specs.BLOCK, x=rows2d, shift=shift,
                 rows=rows, channels=channels, rows_per_block=rows_per_block,
                 first_out=first, second_out=second)
    mean, variance, inv_std, gain = (xp.empty(channels, x.dtype) for _ in range(4))
    finish, fed_args = bn_specs.BN_STATS_FINISH, {}
    if fed is not None:
        training, given_mean, given_variance = fed
        finish, fed_args = bn_specs.BN_STATS_FINISH_FED, {
            "training": training, "given_mean": xp.ascontiguousarray(given_mean),
            "given_variance": xp.ascontiguousarray(given_variance)}
    launcher.raw(finish, _finish_grid(channels), bn_specs.FINISH_BLOCK,
                 first=first, second=second, shift=shift, scale=xp.ascontiguousarray(scale),
                 blocks=blocks, channels=channels, rows=rows, epsilon=epsilon, mean=mean,
                 variance=variance, inv_std=inv_std, gain=gain, **fed_args)
    y = xp.empty_like(rows2d)
    launcher.elementwise(bn_specs.BN_APPLY_RELU if relu else bn_specs.BN_APPLY,
                         rows2d, mean, gain, offset, y)
    return y.reshape(x.shape), mean, variance, mean, inv_std


def batch_norm_grad_training(launcher, xp, grad, relu_output, x, scale, mean, inv_std,
                             training=None):
    """FusedBatchNormGrad in training, of ``grad`` masked by ``relu_output > 0``
    first (ReluGrad) unless that is None: (dx, dscale, doffset). With a fed
    flag ``training`` (a bool array on the device) False, no gradient flows
    through the batch statistics (inference's gradient)::

        dx, dscale, doffset = batch_norm_grad_training(
            ReferenceLauncher(), np, grad, y, x, scale, mean, inv_std)
    """
    grad2d, rows2d = _rows(xp, grad), _rows(xp, x)
    rows, channels = rows2d.shape
    masked = relu_output is not None
    relu2d = _rows(xp, relu_output) if masked else grad2d     # not read when unmasked
    blocks, rows_per_block = bn_specs.partial_blocks(rows)
    first, second = (xp.empty((blocks, channels), grad.dtype) for _ in range(2))
    mean = xp.ascontiguousarray(mean)
    launcher.raw(bn_specs.BN_GRAD_PARTIALS, blocks, bn_specs.BLOCK, grad=grad2d,
                 relu_output=relu2d, x=rows2d, mean=mean, rows=rows, channels=channels,
                 rows_per_block=rows_per_block, masked=int(masked), first_out=first,
                 second_out=second)
    dscale, doffset, gain, k_centered, k_offset = (xp.empty(channels, grad.dtype)
                                                   for _ in range(5))
    finish, fed_args = (bn_specs.BN_GRAD_FINISH, {}) if training is None else \
        (bn_specs.BN_GRAD_FINISH_FED, {"training": training})
    launcher.raw(finish, _finish_grid(channels), bn_specs.FINISH_BLOCK,
                 first=first, second=second, scale=xp.ascontiguousarray(scale),
                 inv_std=xp.ascontiguousarray(inv_std), blocks=blocks, channels=channels,
                 rows=rows, dscale=dscale, doffset=doffset, gain=gain, k_centered=k_centered,
                 k_offset=k_offset, **fed_args)
    dx = xp.empty_like(grad2d)
    coefficients = (mean, gain, k_centered, k_offset, dx)
    if masked:
        launcher.elementwise(bn_specs.BN_GRAD_APPLY_MASKED, grad2d, relu2d, rows2d,
                             *coefficients)
    else:
        launcher.elementwise(bn_specs.BN_GRAD_APPLY, grad2d, rows2d, *coefficients)
    return dx.reshape(x.shape), dscale, doffset


def _finish_grid(channels):
    return -(-channels // bn_specs.FINISH_BLOCK)


def _batch_norm_kernels(xp, table, launcher):
    def train(x, scale, offset, epsilon, relu, fed=None):
        if not _takes(x, scale, offset, *(fed[1:] if fed else ())) or \
                fed is not None and fed[0].dtype != np.bool_:
            return None
        return batch_norm_training(launcher, xp, x, scale, offset, epsilon, relu, fed)

    def train_grad(grad, relu_output, x, scale, mean, inv_std, training=None):
        if not _takes(grad, x, scale, mean, inv_std) or \
                training is not None and training.dtype != np.bool_:
            return None
        return batch_norm_grad_training(launcher, xp, grad, relu_output, x, scale, mean,
                                        inv_std, training)
    return batch_norm_chain_kernels(xp, table, train, train_grad, flag_on_device=True)


def gpu_kernels(xp, table, launcher=None):
    """The makers that replace ``table``'s (a kernels.build_kernels table)
    Conv2D, Conv2DBackpropInput, FusedBatchNorm and FusedBatchNormGrad, plus
    the fused batch-norm chains; each falls back to ``table``'s maker for
    what its kernels do not take. ``launcher``: CupyLauncher() by default::

        KERNELS.update(gpu_kernels(cupy, KERNELS))      # cupy_backend.py
    """
    launcher = CupyLauncher() if launcher is None else launcher
    generic = dict(table)
    return {**_conv_kernels(xp, generic, launcher),
            **_batch_norm_kernels(xp, generic, launcher)}
