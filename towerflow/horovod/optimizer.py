"""hvd.DistributedOptimizer: a TF1 optimizer whose compute_gradients returns
gradients averaged (or summed) over all ranks, so that every rank applies the
same update: one process on the global batch, spread over size() ranks.

With ``backward_passes_per_step=N`` each rank adds N passes' gradients into
local accumulators and only every N-th run all-reduces them and updates the
variables (the other runs change no variable or slot but still count
global_step, as Horovod's do): N micro-batches make one step, with one
all-reduce per step.
"""

from ..graph import core
from ..graph.core import GraphKeys
from ..ops import array_ops, control_flow_ops, math_ops, state_ops
from ..ops.constant_ops import zeros
from ..ops.indexed_slices import IndexedSlices, densify
from ..train.optimizer import Optimizer
from . import basics
from .collectives import Average, Compression, Sum, _check_reduce_op, allreduce


class _DistributedOptimizer(Optimizer):
    """See DistributedOptimizer."""

    def __init__(self, optimizer, name, use_locking, settings):
        super().__init__(use_locking, name or f"Distributed{type(optimizer).__name__}")
        self._optimizer = optimizer
        self._settings = settings
        self._update_gates = {}     # graph -> bool scalar: this run applies the update

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's gradients, all-reduced over the ranks (every
        ``backward_passes_per_step``-th run; the others accumulate)."""
        grads_and_vars = self._optimizer.compute_gradients(*args, **kwargs)
        grads = [grad for grad, _ in grads_and_vars]
        variables = [var for _, var in grads_and_vars]
        graph = variables[0].graph
        with graph.as_default(), graph.name_scope(f"{self._name}_Allreduce"):
            if self._settings.passes > 1:
                grads = self._accumulated(graph, grads)
            else:
                grads = self._reduced(grads)
        return list(zip(grads, variables))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """The wrapped optimizer's update; with backward_passes_per_step > 1 it
        changes the variables only on the runs that all-reduced."""
        grads_and_vars = list(grads_and_vars)
        graph = grads_and_vars[0][1].graph if grads_and_vars else core.get_default_graph()
        gate = self._update_gates.get(graph)
        if gate is None:
            return self._optimizer.apply_gradients(grads_and_vars, global_step, name)
        update = self._optimizer._apply_gradients(grads_and_vars, None, name, gate=gate)
        if global_step is None:
            return update
        with graph.control_dependencies([update]):
            return global_step.assign_add(1).op

    def get_slot(self, var, name):
        return self._optimizer.get_slot(var, name)

    def get_slot_names(self):
        return self._optimizer.get_slot_names()

    def variables(self):
        return self._optimizer.variables()

    # -- the all-reduce -------------------------------------------------------------

    def _reduced(self, grads):
        """Each gradient all-reduced; alone (size 1) they are returned as they
        are, as Horovod does."""
        settings = self._settings
        if settings.sparse_as_dense:
            grads = [densify(grad) if isinstance(grad, IndexedSlices) else grad
                     for grad in grads]
        if basics.size() == 1:
            return grads
        return [None if grad is None else self._reduce_one(grad) for grad in grads]

    def _reduce_one(self, grad):
        settings = self._settings
        factor = settings.predivide
        if factor == 1.0:
            return allreduce(grad, device_dense=settings.device_dense,
                             device_sparse=settings.device_sparse,
                             compression=settings.compression, op=settings.op)
        # Horovod's gradient_predivide_factor: divide by f before the sum and
        # by size()/f after it (the sum stays smaller in float16)
        summed = allreduce(grad * (1.0 / factor), device_dense=settings.device_dense,
                           device_sparse=settings.device_sparse,
                           compression=settings.compression, op=Sum)
        return summed * (factor / basics.size())

    # -- backward_passes_per_step ---------------------------------------------------

    def _accumulated(self, graph, grads):
        """Add this run's gradients to the accumulators (the first pass of an
        update overwrites them); every N-th run, return their all-reduced sum
        (divided by N with average_aggregated_gradients), else the local sums
        (which no update uses)."""
        settings = self._settings
        grads = [self._dense_for_accumulation(grad) for grad in grads]
        present = [index for index, grad in enumerate(grads) if grad is not None]
        accumulators, passes = self._accumulators(graph, [grads[i] for i in present])
        first_pass = math_ops.equal(math_ops.floormod(passes.read_value(), settings.passes), 0)
        # NOTE: overwritten on the first pass rather than zeroed after the
        # all-reduce: an assign's output is the variable's own buffer, so
        # zeroing it in the same run would zero the gradients it returned
        sums = [acc.assign(math_ops.where(first_pass, grads[i], acc.read_value() + grads[i]))
                for acc, i in zip(accumulators, present)]
        with graph.control_dependencies(sums):
            count = passes.assign_add(1)
        is_update = math_ops.equal(math_ops.floormod(count, settings.passes), 0,
                                   name="is_update_step")
        self._update_gates[graph] = is_update

        def reduce():
            reduced = self._reduced(sums)
            if settings.average_passes:
                return [grad / float(settings.passes) for grad in reduced]
            return [array_ops.identity(grad) for grad in reduced]

        def keep_local():
            return [array_ops.identity(total) for total in sums]

        outputs = control_flow_ops.cond(is_update, reduce, keep_local, strict=True)
        result = [None] * len(grads)
        for index, output in zip(present, outputs):
            result[index] = output
        return result

    def _dense_for_accumulation(self, grad):
        if not isinstance(grad, IndexedSlices):
            return grad
        if self._settings.sparse_as_dense:
            return densify(grad)
        raise ValueError("IndexedSlices are not supported when `backward_passes_per_step` > 1 "
                         "and `sparse_as_dense` is False.")

    def _accumulators(self, graph, grads):
        """One zero-filled local variable per gradient and a pass counter: local
        variables, so broadcast_global_variables and checkpoints leave them."""
        local = [GraphKeys.LOCAL_VARIABLES]
        with graph.control_dependencies(None), graph.name_scope(None), \
                graph.name_scope(f"{self._name}_accumulation"):
            accumulators = [
                state_ops.Variable(zeros(grad.shape, grad.dtype), trainable=False,
                                   collections=local, name=f"gradient_{index}")
                for index, grad in enumerate(grads)]
            passes = state_ops.Variable(0, trainable=False, collections=local, name="passes",
                                        dtype="int64")
        return accumulators, passes


class _Settings:
    def __init__(self, **values):
        self.__dict__.update(values)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                         device_sparse="", compression=Compression.none,
                         sparse_as_dense=False, backward_passes_per_step=1, op=Average,
                         gradient_predivide_factor=1.0, average_aggregated_gradients=False):
    """Wrap a ``tf.train`` optimizer so its gradients are all-reduced over the
    ranks (averaged by default) before they are applied.

    Example::

        opt = tf.train.MomentumOptimizer(0.01 * hvd.size(), 0.9)
        opt = hvd.DistributedOptimizer(opt, compression=hvd.Compression.fp16)
        train_op = opt.minimize(loss, global_step=tf.train.get_or_create_global_step())
    """
    if not isinstance(optimizer, Optimizer):   # a ValueError, as Horovod's
        raise ValueError("Provided optimizer doesn't inherit from either legacy "  # noqa: TRY004
                         f"TensorFlow or Keras optimizer: {optimizer}")
    _check_reduce_op(op)
    if isinstance(backward_passes_per_step, bool) or not isinstance(backward_passes_per_step,
                                                                    int) \
            or backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0 (an int); got "
                         f"{backward_passes_per_step!r}")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    settings = _Settings(device_dense=device_dense, device_sparse=device_sparse,
                         compression=compression, sparse_as_dense=sparse_as_dense, op=op,
                         passes=backward_passes_per_step,
                         predivide=float(gradient_predivide_factor),
                         average_passes=bool(average_aggregated_gradients))
    return _DistributedOptimizer(optimizer, name, use_locking, settings)
