"""``tf.nn.static_rnn`` (the cell unrolled in Python, one copy of its ops per
step) and ``tf.nn.dynamic_rnn`` (the cell's step built once, run T times by
``tf.while_loop``) and ``tf.nn.bidirectional_dynamic_rnn`` (two of those,
the second over the sequences reversed), with TF 1.15's semantics::

    cell = tf.nn.rnn_cell.BasicLSTMCell(64)
    outputs, state = tf.nn.dynamic_rnn(cell, inputs, sequence_length=lengths,
                                       dtype=tf.float32)     # inputs [batch, time, depth]

Past a sequence's length its outputs are zeros and its state is carried
through unchanged, so ``state`` is each sequence's state at its last step.
The per-step outputs of dynamic_rnn gather in a [time, batch, units] loop
variable, row t written in place at step t (``write_step_row``, where TF has
a TensorArray).
"""

from .. import dtypes
from ..ops import array_ops, math_ops, nest, variable_scope
from ..ops.constant_ops import constant, convert_to_tensor, zeros, zeros_like
from ..ops.index_ops import reverse as array_ops_reverse
from ..ops.sequence_ops import reverse_sequence
from ..ops.slice_ops import write_step_row
from .rnn_cell_impl import zeros_rows


def _initial_state(cell, initial_state, dtype, batch_size, message):
    if initial_state is not None:
        return initial_state
    if not dtype:
        raise ValueError(message)
    return cell.zero_state(batch_size, dtype)


def _sequence_length(sequence_length):
    """``sequence_length`` as an int32 vector, or None."""
    if sequence_length is None:
        return None
    lengths = math_ops.cast(convert_to_tensor(sequence_length), dtypes.int32)
    if lengths.shape.ndims not in (None, 1):
        raise ValueError(f"sequence_length must be a vector of length batch_size, but saw "
                         f"shape: {lengths.shape}")
    return array_ops.identity(lengths, name="sequence_length")


def _copy_past_length(time, lengths, zero_output, state, output, new_state):
    """TF's rule for a step past a sequence's length: the output is zeros and
    the state the previous one."""
    finished = math_ops.greater_equal(time, lengths)[:, None]     # [batch, 1]
    output = math_ops.where(finished, zero_output, output)
    new_state = nest.map_structure(lambda old, new: math_ops.where(finished, old, new),
                                       state, new_state)
    return output, new_state


def _check_cell(cell, cell_name="cell"):
    missing = [part for part in ("output_size", "state_size", "zero_state")
               if not hasattr(cell, part)] + ([] if callable(cell) else ["__call__"])
    if missing:
        raise TypeError(f"The argument '{cell_name}' ({cell!r}) is not an RNNCell: "
                        f"{', '.join(missing)} missing.")


def _batch_size(inputs, axis):
    """The batch size: an int where the static shape knows it, else a tensor."""
    size = inputs.shape.dims[axis] if inputs.shape.dims else None
    return size if size is not None else array_ops.shape(inputs)[axis]


def static_rnn(cell, inputs, initial_state=None, dtype=None, sequence_length=None,
               scope=None):
    """The cell run over ``inputs``, a list of T tensors [batch, depth], unrolled
    into T copies of its step (sharing one set of variables, under ``rnn/``);
    returns ``(outputs, state)``, outputs a list of T tensors::

        outputs, state = tf.nn.static_rnn(cell, tf.unstack(x, axis=1), dtype=tf.float32)
    """
    _check_cell(cell)
    if not nest.is_sequence(inputs):
        raise TypeError("inputs must be a sequence")
    if not inputs:
        raise ValueError("inputs must not be empty")
    inputs = [convert_to_tensor(each) for each in inputs]
    with variable_scope.variable_scope(scope or "rnn"):
        state = _initial_state(cell, initial_state, dtype, _batch_size(inputs[0], 0),
                               "If no initial_state is provided, dtype must be specified")
        lengths = _sequence_length(sequence_length)
        outputs = []
        for time, step_input in enumerate(inputs):
            output, new_state = cell(step_input, state)
            if lengths is not None:
                output, new_state = _copy_past_length(time, lengths, zeros_like(output),
                                                      state, output, new_state)
            outputs.append(output)
            state = new_state
        return outputs, state


def dynamic_rnn(cell, inputs, sequence_length=None, initial_state=None, dtype=None,
                parallel_iterations=None, swap_memory=False, time_major=False, scope=None):
    """The cell run over ``inputs`` ([batch, time, depth], or [time, batch,
    depth] when ``time_major``) by one ``tf.while_loop``: the step is built
    once, its variables under ``rnn/``. Returns ``(outputs, state)``: outputs
    [batch, time, output_size] (time-major when ``time_major``), zero past
    each ``sequence_length``; state each sequence's state at its last step::

        outputs, state = tf.nn.dynamic_rnn(tf.nn.rnn_cell.GRUCell(32), x, dtype=tf.float32)
    """
    _check_cell(cell)
    inputs = convert_to_tensor(inputs)
    if inputs.shape.ndims is not None and inputs.shape.ndims < 3:
        raise ValueError(f"dynamic_rnn needs inputs of rank 3 at least ([batch, time, "
                         f"depth]), got {inputs.name} of shape {inputs.shape}")
    lengths = _sequence_length(sequence_length)
    with variable_scope.variable_scope(scope or "rnn"):
        time_major_inputs = inputs if time_major else _swap_batch_time(inputs)
        state = _initial_state(cell, initial_state, dtype, _batch_size(time_major_inputs, 1),
                               "If there is no initial_state, you must give a dtype.")
        outputs, state = _dynamic_rnn_loop(cell, time_major_inputs, state, lengths,
                                           parallel_iterations or 32, swap_memory)
        return (outputs if time_major else _swap_batch_time(outputs)), state


def _swap_batch_time(tensor):
    """[batch, time, ...] <-> [time, batch, ...]."""
    rank = tensor.shape.ndims
    return array_ops.transpose(tensor, [1, 0] + list(range(2, rank)))


def _dynamic_rnn_loop(cell, inputs, state, lengths, parallel_iterations, swap_memory):
    """Steps 0..T-1 in a while_loop over (time, outputs, *state leaves)."""
    from ..ops.control_flow_ops import while_loop  # NOTE: the controlflow stage
    steps = _batch_size(inputs, 0)
    outputs = _zero_outputs(inputs, cell.output_size, state)
    zero_output = outputs[0]

    def keep_going(time, *_):
        return math_ops.less(time, steps)

    def step(time, outputs, *state_leaves):
        old_state = nest.pack_sequence_as(state, state_leaves)
        output, new_state = cell(inputs[time], old_state)
        if lengths is not None:
            output, new_state = _copy_past_length(time, lengths, zero_output, old_state,
                                                  output, new_state)
        return [time + 1, write_step_row(outputs, time, output)] + nest.flatten(new_state)

    # NOTE: write_step_row's contract: rows 0, 1, ... in order, read by it only,
    # no gradient wanted for the initial rows (zeros from constants and
    # ZerosLike: none flows back from them). No tf.stop_gradient op: an op
    # more before the cell's variables would shift their seeded initial values.
    loop_vars = [constant(0, name="time"), outputs] + nest.flatten(state)
    final = while_loop(keep_going, step, loop_vars, parallel_iterations=parallel_iterations,
                       swap_memory=swap_memory)
    return final[1], nest.pack_sequence_as(state, final[2:])


def _zero_outputs(inputs, output_size, state):
    """Zeros [time, batch, output_size] in the state's dtype (shapes from
    ``inputs``, known or not)."""
    dtype = nest.flatten(state)[0].dtype
    steps, batch = (inputs.shape.dims or [None, None])[:2]
    if steps is not None and batch is not None:
        return zeros([steps, batch, output_size], dtype)
    # NOTE: tf.zeros needs a static shape: [time, batch, 1] zeros broadcast
    # against a [output_size] row.
    column = math_ops.cast(zeros_like(inputs[:, :, :1]), dtype)
    return column + zeros_rows(1, output_size, dtype)[0]



def bidirectional_dynamic_rnn(cell_fw, cell_bw, inputs, sequence_length=None,
                              initial_state_fw=None, initial_state_bw=None, dtype=None,
                              parallel_iterations=None, swap_memory=False, time_major=False,
                              scope=None):
    """Two dynamic_rnn passes, as TF 1.15: ``cell_fw`` over ``inputs`` (variables
    under ``bidirectional_rnn/fw/``) and ``cell_bw`` over each sequence
    reversed within its length (``tf.reverse_sequence``; the whole time axis
    without ``sequence_length``), its outputs reversed back. Returns
    ``((output_fw, output_bw), (state_fw, state_bw))``::

        (fw, bw), _ = tf.nn.bidirectional_dynamic_rnn(
            tf.nn.rnn_cell.GRUCell(32), tf.nn.rnn_cell.GRUCell(32), x,
            sequence_length=lengths, dtype=tf.float32)
        both = tf.concat([fw, bw], axis=2)
    """
    _check_cell(cell_fw, "cell_fw")
    _check_cell(cell_bw, "cell_bw")
    time_axis, batch_axis = (0, 1) if time_major else (1, 0)
    lengths = None if sequence_length is None else math_ops.cast(
        convert_to_tensor(sequence_length), dtypes.int32)

    def reverse(tensor):
        if lengths is None:
            return array_ops_reverse(tensor, [time_axis])
        return reverse_sequence(tensor, lengths, seq_axis=time_axis, batch_axis=batch_axis)

    common = {"sequence_length": sequence_length, "dtype": dtype,
              "parallel_iterations": parallel_iterations, "swap_memory": swap_memory,
              "time_major": time_major}
    with variable_scope.variable_scope(scope or "bidirectional_rnn"):
        output_fw, state_fw = dynamic_rnn(cell_fw, inputs, initial_state=initial_state_fw,
                                          scope="fw", **common)
        reversed_inputs = nest.map_structure(reverse, inputs)
        output_bw, state_bw = dynamic_rnn(cell_bw, reversed_inputs,
                                          initial_state=initial_state_bw, scope="bw", **common)
    return (output_fw, reverse(output_bw)), (state_fw, state_bw)
