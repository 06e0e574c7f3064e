"""Stage 5a: kernel fusion, a rewrite of a plan's op list before it binds kernels.

Some chains of ops cost far less as one kernel: the NumPy backend adds a
convolution's bias and applies its ReLU to each block of the GEMM's output
while the block is still in cache, instead of two more passes over the whole
activation. :func:`fuse` finds such chains among the ops a plan runs and
replaces each by one :class:`FusedOp`, which the plan binds like any op::

    units = fuse(ops, targets, feeds, device_of, kernels_of)

A chain fuses only where nothing else can tell: its inner tensors are read by
no op outside the chain (except for their shape: such readers get the
chain's output of the same shape and dtype as a stand-in), not fetched and
not fed; all its ops are on one device, whose backend has the fused kernel;
and no op placed between the chain's first and last op reads its outputs,
depends on it through a control edge or changes state (the fused step runs
where the last op ran). The fused
kernels return what the separate kernels return, bit for bit.

TOWERFLOW_FUSION=0 turns fusion off (to compare, or to rule it out).

Fused chains (kernel name: ops, first to last):

- ``_FusedConv2D``: Conv2D → BiasAdd (→ Relu), or Conv2D → Add of a
  [channels] bias (``conv2d(x, w) + b``). Inputs (x, filter, bias);
  outputs (the Conv2D's patches output, the last op's output).
  With a MaxPool after the Relu whose winners only masked gradients read
  (below), the pool joins the chain and runs before the ReLU, on each block
  while it is in cache; outputs (patches, conv + bias, pooled, winners).
- ``_MaxPoolGradRelu``: MaxPoolGrad → ReluGrad, where the ReluGrad's ``y`` is
  the pooled input. Inputs (x, winners, grad, pooled max); output the
  ReluGrad's. A window's gradient goes to a cell equal to its max, so masking
  the small pooled gradient by ``max > 0`` equals masking the big one by
  ``y > 0``.
- ``_MaxPoolGradReluBatchNormGrad``: MaxPoolGrad → ReluGrad → FusedBatchNormGrad
  (training), the _MaxPoolGradRelu above then a batch-norm gradient, on the
  CPU (backends/batch_norm_pool.py). Inputs (x, winners, grad, pooled max,
  then the batch-norm gradient's x, scale, mean, inv_std, and a fed training
  flag last); outputs the batch-norm gradient's. The full-size routed gradient is never written.
- ``_FusedBatchNormRelu``: FusedBatchNorm (training) → Relu. Inputs the batch
  norm's; outputs (the ReLU's, then the batch norm's four statistics). It
  runs where the batch norm ran: the moving-average updates that read the
  statistics come between the two ops.
- ``_FusedBatchNormReluPool``: FusedBatchNorm (training) → Relu → MaxPool,
  where only masked gradients (_MaxPoolGradRelu) read the pool's winners.
  Inputs the batch norm's; outputs (pooled, winners, then the batch norm's
  four statistics); the batch norm's input stands in for the ReLU output's
  shape, which is never made (backends/batch_norm_pool.py).
- ``_ReluGradBatchNormGrad``: ReluGrad → FusedBatchNormGrad (training).
  Inputs (grad, relu output, then the batch-norm gradient's x, scale, mean,
  inv_std); outputs the batch-norm gradient's.

GPUs run the batch-norm chains' kernels in CUDA (backends/cupy_conv.py), CPUs
compiled (backends/native_batch_norm.py).
"""


from . import switches
from .graph.core import Operation
from .graph.registry import OpDef


def enabled():
    """Whether plans fuse (TOWERFLOW_FUSION, read when a plan compiles; default on)."""
    return switches.on("TOWERFLOW_FUSION")


class FusedOp:
    """Several graph ops run as one kernel (see the module docstring)."""

    def __init__(self, kernel, members, inputs, outputs, attrs, device, stand_ins=None,
                 shape_only_inputs=(), runs_first=False):
        self.type = kernel
        self.op_def = OpDef(kernel, shape_fn=None, kernel=kernel, variadic_outputs=True,
                            shape_only_inputs=shape_only_inputs)
        self.members = members          # the graph ops, first to last
        self.control_inputs = [op for member in members for op in member.control_inputs]
        self.name = "+".join(op.name for op in members)
        self.inputs = inputs            # graph Tensors
        self.outputs = outputs          # graph Tensors the fused kernel returns
        self.attrs = attrs
        self.device = device            # the logical device all members are on
        # {inner tensor: an output of the same shape and dtype}, for readers of
        # the inner tensor's shape only
        self.stand_ins = stand_ins or {}
        # Runs where its first member ran (else its last): see _Context.can_run_early.
        self.runs_first = runs_first

    def __repr__(self):
        return f"<FusedOp {self.type} '{self.name}'>"


def fuse(ops, targets, feeds, device_of, kernels_of):
    """``ops`` (in run order) with fusable chains replaced by FusedOps.

    ``targets``: the plan's fetched Tensors and run Operations; ``feeds``: its
    fed Tensors; ``device_of(op)``: the op's logical device;
    ``kernels_of(device)``: that device's kernel table."""
    units = ops
    for matchers in _PASSES:
        context = _Context(units, targets, feeds, device_of, kernels_of)
        chains = [chain for unit in units for chain in [_match(unit, matchers, context)]
                  if chain is not None]
        units = _replace(units, chains)
    return units


def _replace(units, chains):
    """``units`` with each chain's members replaced by the chain, placed where
    its last member was (a member of an earlier chain keeps that one)."""
    replaced, position_of_fused = {}, {}
    for fused in chains:
        if any(member in replaced for member in fused.members):
            continue
        for member in fused.members:
            replaced[member] = fused
        position_of_fused[fused.members[0 if fused.runs_first else -1]] = fused
    kept = []
    for unit in units:
        if unit in position_of_fused:
            kept.append(position_of_fused[unit])
        elif unit not in replaced:
            kept.append(unit)
    return kept


class _Context:
    """Who reads what among the plan's ops, and which tensors are pinned."""

    def __init__(self, ops, targets, feeds, device_of, kernels_of):
        self.ops, self.device_of, self.kernels_of = ops, device_of, kernels_of
        self.position = {op: index for index, op in enumerate(ops)}
        self.readers = {}               # tensor -> ops reading its value
        self.shape_readers = set()      # tensors some op reads the shape of
        self.control_dependents = set()
        for op in ops:
            shape_only = op.op_def.shape_only_inputs
            for index, tensor in enumerate(op.inputs):
                if index in shape_only:
                    self.shape_readers.add(tensor)
                else:
                    self.readers.setdefault(tensor, []).append(op)
            self.control_dependents.update(op.control_inputs)
        self.fed = set(feeds)
        self.pinned = self.fed | {target for target in targets
                                  if not isinstance(target, Operation)}
        self.run_targets = {target for target in targets if isinstance(target, Operation)}

    def only_reader(self, tensor):
        """The one op reading ``tensor``'s value (once), if it is neither
        fetched nor fed."""
        readers = self.readers.get(tensor, [])
        return readers[0] if len(readers) == 1 and tensor not in self.pinned else None

    def stand_ins(self, inner, output):
        """{tensor: ``output``} for the ``inner`` tensors whose shape is read."""
        return {tensor: output for tensor in inner if tensor in self.shape_readers}

    def can_fuse(self, members, kernel):
        """Whether ``members`` (a chain, first to last) may run as ``kernel``."""
        device = self.device_of(members[0])
        if kernel not in self.kernels_of(device):
            return False
        if any(self.device_of(op) != device for op in members[1:]):
            return False
        inner = set(members[:-1])
        if inner & (self.control_dependents | self.run_targets):
            return False
        return self._nothing_in_between(members)

    def can_run_early(self, members, kernel):
        """Whether ``members`` may run as ``kernel`` where the first ran: the
        later members read nothing but the chain's own tensors and values
        made before it, and wait on nothing made after it. (Ops in between
        may then read the first member's outputs: the fused op makes them.)"""
        device = self.device_of(members[0])
        if kernel not in self.kernels_of(device) or \
                any(self.device_of(op) != device for op in members[1:]):
            return False
        if set(members[:-1]) & (self.control_dependents | self.run_targets):
            return False
        first = self.position[members[0]]
        own = {tensor for op in members for tensor in op.outputs}
        return all(self.position.get(tensor.op, -1) < first
                   for op in members[1:] for tensor in op.inputs if tensor not in own) and \
            all(self.position.get(control, -1) < first
                for op in members[1:] for control in op.control_inputs)

    def _nothing_in_between(self, members):
        first, last = self.position[members[0]], self.position[members[-1]]
        outputs = {tensor for op in members for tensor in op.outputs}
        chain = set(members)
        for op in self.ops[first + 1:last]:
            if op in chain:
                continue
            if (op.op_def.stateful and op.type not in _READS_STATE_ONLY) or \
                    any(tensor in outputs for tensor in op.inputs):
                return False
            if chain.intersection(op.control_inputs):
                return False
        return True


# Stateful ops that change nothing: a layer creates its bias variable between
# its Conv2D and its BiasAdd. Any other stateful op (an update, a random draw,
# a collective) between a chain's ops keeps the chain apart.
_READS_STATE_ONLY = frozenset({"VariableV2", "ReadVariable"})


def _match(unit, matchers, context):
    matcher = matchers.get(unit.type) if isinstance(unit, Operation) else None
    return matcher(unit, context) if matcher is not None else None


def _conv_bias_relu(conv, context):
    """Conv2D → BiasAdd (→ Relu (→ MaxPool, see _pool_after_relu))."""
    bias_add = context.only_reader(conv.outputs[0])
    bias = _bias_added(bias_add, conv.outputs[0]) if bias_add is not None else None
    if bias is None:
        return None
    members = [conv, bias_add]
    relu = context.only_reader(bias_add.outputs[0])
    if relu is not None and relu.type == "Relu":
        members.append(relu)
        pool = _pool_after_relu(relu, context)
        if pool is not None and context.can_fuse(members + [pool], "_FusedConv2D"):
            return _fused_conv_pool(members + [pool], bias, context)
    if not context.can_fuse(members, "_FusedConv2D"):
        return None
    attrs = {**conv.attrs, "activation": "Relu" if len(members) == 3 else None, "pool": None}
    output = members[-1].outputs[0]
    inner = [op.outputs[0] for op in members[:-1]]      # all of one shape and dtype
    return FusedOp("_FusedConv2D", members, [conv.inputs[0], conv.inputs[1], bias],
                   [conv.outputs[1], output], attrs, context.device_of(conv),
                   context.stand_ins(inner, output))


def _bias_added(op, conv_output):
    """The bias ``op`` adds to a convolution's output: a BiasAdd's, or the
    vector of an Add of ``conv_output`` and a [channels] tensor of its dtype
    (``tf.nn.conv2d(x, w) + b``, TF1's tutorials' way: the same sums, x + b
    per value, either order); else None."""
    if op.type == "BiasAdd":
        return op.inputs[1] if op.inputs[0] is conv_output else None
    if op.type not in ("Add", "AddV2") or conv_output not in op.inputs:
        return None
    other = op.inputs[1] if op.inputs[0] is conv_output else op.inputs[0]
    channels = conv_output.shape.dims[-1] if conv_output.shape.rank == 4 else None
    if other is conv_output or other.dtype != conv_output.dtype or channels is None or \
            other.shape.rank != 1 or other.shape.dims[0] != channels:
        return None
    return other


# The fused kernels that route a pool's gradient masked by its max > 0.
_MASKED_POOL_GRADIENTS = frozenset({"_MaxPoolGradRelu", "_MaxPoolGradReluBatchNormGrad"})


def _pool_after_relu(relu, context):
    """The MaxPool reading a ReLU's output, if pooling can come first: nothing
    else reads the ReLU's values, and only masked gradients
    (_MaxPoolGradRelu) read the pool's winners. max(relu(z)) = relu(max(z)),
    and a window whose max is not positive passes no gradient either way."""
    pool = context.only_reader(relu.outputs[0])
    if pool is None or pool.type != "MaxPool" or pool.inputs[0] is not relu.outputs[0]:
        return None
    winners = pool.outputs[1]
    readers = context.readers.get(winners, [])
    if winners in context.pinned or not readers or \
            any(reader.type not in _MASKED_POOL_GRADIENTS for reader in readers):
        return None
    return pool


def _fused_conv_pool(members, bias, context):
    """Conv2D → BiasAdd → Relu → MaxPool: pools each block of conv + bias and
    applies the ReLU to the pooled values. Outputs: patches, conv + bias (a
    stand-in for the shape of the ReLU's output), the pooled max, winners."""
    conv, bias_add, relu, pool = members
    attrs = {**conv.attrs, "activation": "Relu", "pool": dict(pool.attrs)}
    biased = bias_add.outputs[0]
    return FusedOp("_FusedConv2D", members, [conv.inputs[0], conv.inputs[1], bias],
                   [conv.outputs[1], biased, pool.outputs[0], pool.outputs[1]], attrs,
                   context.device_of(conv),
                   context.stand_ins([conv.outputs[0], relu.outputs[0]], biased))


def _max_pool_grad_relu(relu_grad, context):
    grad, y = relu_grad.inputs
    pool_grad = grad.op
    if pool_grad.type != "MaxPoolGrad" or context.only_reader(grad) is not relu_grad:
        return None
    x, winners, _ = pool_grad.inputs
    pool = winners.op
    if x is not y or pool.type != "MaxPool" or pool.inputs[0] is not x or \
            pool not in context.position or context.fed.intersection(pool.outputs):
        return None     # the pooled max must be the one MaxPool computes in this plan
    members = [pool_grad, relu_grad]
    with_batch_norm = _pool_grad_batch_norm_grad(members, pool, context)
    if with_batch_norm is not None:
        return with_batch_norm
    if not context.can_fuse(members, "_MaxPoolGradRelu"):
        return None
    return FusedOp("_MaxPoolGradRelu", members, list(pool_grad.inputs) + [pool.outputs[0]],
                   [relu_grad.outputs[0]], dict(pool_grad.attrs), context.device_of(pool_grad),
                   context.stand_ins([grad], relu_grad.outputs[0]), shape_only_inputs=(0,))


def _pool_grad_batch_norm_grad(members, pool, context):
    """MaxPoolGrad → ReluGrad → FusedBatchNormGrad (training, decided when
    built or fed), where the backend has the chain's kernel (the CPU's)."""
    pool_grad, relu_grad = members
    masked = relu_grad.outputs[0]
    bn_grad = context.only_reader(masked)
    if bn_grad is None or bn_grad.type != "FusedBatchNormGrad" or \
            bn_grad.inputs[0] is not masked or bn_grad.attrs.get("is_training") is False:
        return None
    members = members + [bn_grad]
    if not context.can_fuse(members, "_MaxPoolGradReluBatchNormGrad"):
        return None
    return FusedOp("_MaxPoolGradReluBatchNormGrad", members,       # (and a fed flag last)
                   list(pool_grad.inputs) + [pool.outputs[0]] + list(bn_grad.inputs[1:]),
                   list(bn_grad.outputs), {**bn_grad.attrs, "pool": dict(pool_grad.attrs)},
                   context.device_of(pool_grad),
                   context.stand_ins([pool_grad.outputs[0], masked], bn_grad.outputs[0]),
                   shape_only_inputs=(0,))


def _batch_norm_relu(batch_norm, context):
    """FusedBatchNorm (training, decided when built or fed: its kernels pass
    a fed False to the separate kernels' arithmetic) → Relu."""
    if batch_norm.attrs.get("is_training") is False:
        return None
    relu = context.only_reader(batch_norm.outputs[0])
    if relu is None or relu.type != "Relu":
        return None
    members = [batch_norm, relu]
    pool = _pool_after_relu(relu, context)
    if pool is not None and context.can_run_early(members + [pool], "_FusedBatchNormReluPool"):
        return _batch_norm_relu_pool(members + [pool], context)
    if not context.can_run_early(members, "_FusedBatchNormRelu"):
        return None
    return FusedOp("_FusedBatchNormRelu", members, list(batch_norm.inputs),
                   [relu.outputs[0]] + list(batch_norm.outputs[1:]), dict(batch_norm.attrs),
                   context.device_of(batch_norm),
                   context.stand_ins([batch_norm.outputs[0]], relu.outputs[0]), runs_first=True)


def _batch_norm_relu_pool(members, context):
    """FusedBatchNorm → Relu → MaxPool: outputs the pool's (pooled, winners)
    and the batch norm's statistics; the batch norm's input stands in for
    the shape of the inner tensors (same shape and dtype)."""
    batch_norm, relu, pool = members
    return FusedOp("_FusedBatchNormReluPool", members, list(batch_norm.inputs),
                   list(pool.outputs[:2]) + list(batch_norm.outputs[1:]),
                   {**batch_norm.attrs, "pool": dict(pool.attrs)},
                   context.device_of(batch_norm),
                   context.stand_ins([batch_norm.outputs[0], relu.outputs[0]],
                                     batch_norm.inputs[0]), runs_first=True)


def _relu_grad_batch_norm_grad(relu_grad, context):
    """ReluGrad → FusedBatchNormGrad (training, decided when built or fed)."""
    bn_grad = context.only_reader(relu_grad.outputs[0])
    if bn_grad is None or bn_grad.type != "FusedBatchNormGrad" or \
            bn_grad.inputs[0] is not relu_grad.outputs[0] or \
            bn_grad.attrs.get("is_training") is False:
        return None
    members = [relu_grad, bn_grad]
    if not context.can_fuse(members, "_ReluGradBatchNormGrad"):
        return None
    grad, relu_output = relu_grad.inputs
    return FusedOp("_ReluGradBatchNormGrad", members,          # (and a fed flag last)
                   [grad, relu_output] + list(bn_grad.inputs[1:]), list(bn_grad.outputs),
                   dict(bn_grad.attrs), context.device_of(bn_grad),
                   context.stand_ins([relu_grad.outputs[0]], bn_grad.outputs[0]))


# Backward chains fuse first: whether a forward chain may take in its MaxPool
# depends on who reads the pool's winners once the gradients are fused. A
# ReluGrad after a MaxPoolGrad joins the pool's gradient (the smaller array).
_PASSES = ({"ReluGrad": _max_pool_grad_relu}, {"ReluGrad": _relu_grad_batch_norm_grad},
           {"Conv2D": _conv_bias_relu, "FusedBatchNorm": _batch_norm_relu})
