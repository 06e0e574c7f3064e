"""``_FusedBatchNormReluPool``: fusion.py's chain FusedBatchNorm (training)
→ Relu → MaxPool whose pooled winners only masked gradients read, for any
kernel table (written over the table's own kernels, so CuPy's too); and on
the CPU its gradient's chain ``_MaxPoolGradReluBatchNormGrad``.

Its outputs are the MaxPool's (pooled, winners) then the batch norm's four
statistics; the full-size ReLU output is never kept (only its shape was
read, and the batch norm's input stands in for that). Where the CPU's
compiled kernels take the arrays, the output pass normalises, applies the
ReLU and pools each window in one go (native_batch_norm.py), never writing
the full-size array; elsewhere it is the table's _FusedBatchNormRelu, then
its MaxPool. Both give the separate kernels' values bit for bit::

    table.update(batch_norm_relu_pool_kernels(table, CPU_POOL))

``_MaxPoolGradReluBatchNormGrad`` is MaxPoolGrad → ReluGrad (the table's
_MaxPoolGradRelu) → FusedBatchNormGrad (training): inputs the
_MaxPoolGradRelu's (x, winners, grad, pooled max), then the batch-norm
gradient's but its first (x, scale, mean, inv_std, a fed flag last);
outputs the batch-norm gradient's. The compiled kernels make the routed
gradient a block of rows at a time, in cache, right where the batch norm's
sums and output pass read it, instead of writing and reading it back whole
(native_batch_norm.batch_norm_grad_after_pool): the same values, bit for
bit. Measured (benchmarks/cpu_batch_norm.py --without GRAD_KERNEL): 1-2 %
off the cifar10 step at batch 64 and 256; timed alone, with its arrays in
cache, it is 5-20 % slower than the separate kernels (it routes each block
twice: for the sums and for the output)::

    table.update(pool_grad_batch_norm_grad_kernels(table, CPU_POOL))
"""

import copy

from . import native_batch_norm
from .cpu_threads import SERIAL
from .fused_kernels import trains
from .window_geometry import _layout_maker

KERNEL = "_FusedBatchNormReluPool"
GRAD_KERNEL = "_MaxPoolGradReluBatchNormGrad"


def batch_norm_relu_pool_kernels(table, parallel=SERIAL, compiled=True):
    """{KERNEL: maker} over ``table``'s _FusedBatchNormRelu and MaxPool makers
    (looked up when a plan binds the kernel); ``compiled``: try the CPU's
    compiled one-pass kernel first (NumPy tables only)."""
    def make(ctx):
        batch_norm_ctx, pool_ctx = _member_contexts(ctx)
        batch_norm_relu = table["_FusedBatchNormRelu"](batch_norm_ctx)
        max_pool = table["MaxPool"](pool_ctx)

        def separate(x, *inputs):
            outputs = batch_norm_relu(x, *inputs)
            return tuple(max_pool(outputs[0])) + tuple(outputs[1:])
        if not compiled or ctx.attrs["is_training"] is False or \
                not native_batch_norm.one_dtype(batch_norm_ctx):
            return separate
        epsilon, layout_of = ctx.attrs["epsilon"], _layout_maker(ctx.attrs["pool"])

        def run(x, scale, offset, mean, variance, *fed_training):
            # a fed flag (compiled: NumPy's, read on the host): False runs separate
            outputs = native_batch_norm.batch_norm_relu_pool_training(
                x, scale, offset, epsilon, layout_of(x.shape), parallel) \
                if trains(fed_training) else None
            return separate(x, scale, offset, mean, variance, *fed_training) \
                if outputs is None else outputs
        return run
    return {KERNEL: make}


def pool_grad_batch_norm_grad_kernels(table, parallel=SERIAL):
    """{GRAD_KERNEL: maker} over ``table``'s _MaxPoolGradRelu and
    FusedBatchNormGrad makers, the compiled kernels tried first (NumPy
    tables only)."""
    def make(ctx):
        pool_ctx, batch_norm_ctx = _grad_member_contexts(ctx)
        pool_grad = table["_MaxPoolGradRelu"](pool_ctx)
        batch_norm_grad = table["FusedBatchNormGrad"](batch_norm_ctx)

        def separate(pool_input, winners, grad, pooled, *batch_norm_inputs):
            (routed,) = pool_grad(pool_input, winners, grad, pooled)
            return batch_norm_grad(routed, *batch_norm_inputs)
        if ctx.attrs["is_training"] is False or \
                not native_batch_norm.one_dtype(batch_norm_ctx):
            return separate
        layout_of = _layout_maker(ctx.attrs["pool"])

        def run(pool_input, winners, grad, pooled, x, scale, mean, inv_std, *fed_training):
            # a fed flag (compiled: NumPy's, read on the host): False runs separate
            outputs = native_batch_norm.batch_norm_grad_after_pool(
                winners, grad, pooled, x, scale, mean, inv_std, layout_of(x.shape),
                parallel) if trains(fed_training) else None
            return separate(pool_input, winners, grad, pooled, x, scale, mean, inv_std,
                            *fed_training) if outputs is None else outputs
        return run
    return {GRAD_KERNEL: make}


def _grad_member_contexts(ctx):
    """The contexts the pool gradient's and the batch-norm gradient's own
    makers expect (the pool gradient's one output: the batch norm's input)."""
    used = getattr(ctx, "outputs_used", None)
    return (_member(ctx, ctx.attrs["pool"], ctx.output_dtypes[:1],
                    None if used is None else [True]),
            _member(ctx, _batch_norm_attrs(ctx), ctx.output_dtypes, used))


def _member_contexts(ctx):
    """The contexts the batch norm's and the pool's own makers expect: their
    attributes, output dtypes and used outputs."""
    dtypes, used = list(ctx.output_dtypes), getattr(ctx, "outputs_used", None)
    batch_norm_used, pool_used = (None, None) if used is None else \
        ([True] + list(used[2:]), list(used[:2]))
    return (_member(ctx, _batch_norm_attrs(ctx), dtypes[:1] + dtypes[2:], batch_norm_used),
            _member(ctx, ctx.attrs["pool"], dtypes[:2], pool_used))


def _batch_norm_attrs(ctx):
    return {key: value for key, value in ctx.attrs.items() if key != "pool"}


def _member(ctx, attrs, output_dtypes, outputs_used):
    """A copy of ``ctx`` for one member's maker (``outputs_used`` None: ctx's)."""
    member = copy.copy(ctx)
    member.attrs, member.output_dtypes = attrs, list(output_dtypes)
    if outputs_used is not None:
        member.outputs_used = outputs_used
    return member
