"""Sampled losses for many classes: ``tf.nn.nce_loss`` and
``tf.nn.sampled_softmax_loss``, as TensorFlow 1.15's nn_impl.py computes them
(``_compute_sampled_logits``): the logits of each example's true classes and
of ``num_sampled`` classes drawn once per batch (log-uniform by default), less
the log of each class's expected count (``subtract_log_q``), with a sampled
class that is also a true class pushed to -FLT_MAX
(``remove_accidental_hits``). Only the weight rows of those classes are
gathered, so their gradient is an IndexedSlices::

    loss = tf.reduce_mean(tf.nn.nce_loss(weights, biases, labels, embed,
                                         num_sampled=64, num_classes=vocabulary))
"""

from .. import dtypes
from ..autodiff import stop_gradient
from . import array_ops, math_ops
from .candidate_sampling_ops import (
    compute_accidental_hits,
    log_uniform_candidate_sampler,
)
from .constant_ops import convert_to_tensor, ones_like, zeros_like
from .index_ops import embedding_lookup
from .logistic_ops import sigmoid_cross_entropy_with_logits
from .nn_ops import softmax_cross_entropy_with_logits_v2
from .sparse_ops import sparse_to_dense


def compute_sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes,
                           num_true=1, sampled_values=None, subtract_log_q=True,
                           remove_accidental_hits=False, partition_strategy="mod",
                           name=None, seed=None):
    """(logits [batch, num_true + num_sampled], labels: 1/num_true for the true
    columns, 0 for the sampled ones), TF 1.15's _compute_sampled_logits."""
    weights = list(weights) if isinstance(weights, (list, tuple)) else [weights]
    inputs = convert_to_tensor(inputs)
    graph = inputs.graph
    with graph.name_scope(name or "compute_sampled_logits"):
        labels = math_ops.cast(convert_to_tensor(labels), dtypes.int64)
        labels_flat = array_ops.reshape(labels, [-1])
        if sampled_values is None:
            sampled_values = log_uniform_candidate_sampler(
                labels, num_true, num_sampled, True, num_classes, seed=seed)
        sampled, true_count, sampled_count = (stop_gradient(value)
                                              for value in sampled_values)
        sampled = math_ops.cast(sampled, dtypes.int64)
        all_ids = array_ops.concat([labels_flat, sampled], 0)
        true_w, sampled_w = _split_rows(
            _lookup(weights, all_ids, partition_strategy, inputs.dtype), labels_flat)
        true_b, sampled_b = _split_rows(
            _lookup(biases, all_ids, partition_strategy, inputs.dtype), labels_flat)
        sampled_logits = math_ops.matmul(inputs, sampled_w, transpose_b=True) + sampled_b
        true_logits = _true_logits(inputs, true_w, num_true) + \
            array_ops.reshape(true_b, [-1, num_true])
        if remove_accidental_hits:
            sampled_logits += _accidental_hit_logits(labels, sampled, num_true,
                                                     num_sampled, sampled_logits.dtype)
        if subtract_log_q:
            true_logits -= math_ops.log(true_count)
            sampled_logits -= math_ops.log(sampled_count)
        out_logits = array_ops.concat([true_logits, sampled_logits], 1)
        out_labels = array_ops.concat([ones_like(true_logits) / num_true,
                                       zeros_like(sampled_logits)], 1)
        return out_logits, out_labels


def _lookup(params, ids, partition_strategy, dtype):
    rows = embedding_lookup(params, ids, partition_strategy=partition_strategy)
    return rows if rows.dtype is dtype else math_ops.cast(rows, dtype)


def _split_rows(rows, labels_flat):
    """(the rows of the true classes, the rows of the sampled ones)."""
    count = labels_flat.shape.dims[0]
    if count is None:
        count = array_ops.shape(labels_flat)[0]
    return rows[:count], rows[count:]


def _true_logits(inputs, true_w, num_true):
    """Each example's input dotted with each of its true classes' rows."""
    dim = true_w.shape.dims[1] if true_w.shape.ndims == 2 else None
    shape = [-1, num_true, dim] if dim is not None else \
        array_ops.concat([[-1, num_true], array_ops.shape(true_w)[1:2]], 0)
    dots = array_ops.expand_dims(inputs, 1) * array_ops.reshape(true_w, shape)
    return math_ops.reduce_sum(dots, 2)


def _accidental_hit_logits(labels, sampled, num_true, num_sampled, dtype):
    """-FLT_MAX at [row, position] wherever sampled[position] is a true class of row."""
    rows, positions, weights = compute_accidental_hits(labels, sampled, num_true)
    indices = array_ops.concat([array_ops.reshape(math_ops.cast(rows, dtypes.int64), [-1, 1]),
                                array_ops.reshape(positions, [-1, 1])], 1)
    shape = array_ops.concat([math_ops.cast(array_ops.shape(labels)[:1], dtypes.int64),
                              convert_to_tensor([num_sampled], dtype=dtypes.int64)], 0)
    return sparse_to_dense(indices, shape, math_ops.cast(weights, dtype), 0.0,
                           validate_indices=False)


def nce_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1,
             sampled_values=None, remove_accidental_hits=False, partition_strategy="mod",
             name="nce_loss"):
    """Noise-contrastive estimation loss per example ([batch]): the sigmoid
    cross-entropy of the true classes (label 1/num_true) and the sampled ones
    (label 0), summed (TF 1.15's nn_impl.nce_loss).
    ``tf.nn.nce_loss(w, b, labels, embed, num_sampled=5, num_classes=1000)``."""
    logits, labels = compute_sampled_logits(
        weights, biases, labels, inputs, num_sampled, num_classes, num_true=num_true,
        sampled_values=sampled_values, subtract_log_q=True,
        remove_accidental_hits=remove_accidental_hits,
        partition_strategy=partition_strategy, name=name)
    losses = sigmoid_cross_entropy_with_logits(labels=labels, logits=logits,
                                               name="sampled_losses")
    return math_ops.reduce_sum(losses, 1)


def sampled_softmax_loss(weights, biases, labels, inputs, num_sampled, num_classes,
                         num_true=1, sampled_values=None, remove_accidental_hits=True,
                         partition_strategy="mod", name="sampled_softmax_loss", seed=None):
    """The softmax cross-entropy over each example's true classes and the
    sampled ones ([batch]), TF 1.15's nn_impl.sampled_softmax_loss.
    ``tf.nn.sampled_softmax_loss(w, b, labels, h, num_sampled=64, num_classes=10000)``."""
    logits, labels = compute_sampled_logits(
        weights, biases, labels, inputs, num_sampled, num_classes, num_true=num_true,
        sampled_values=sampled_values, subtract_log_q=True,
        remove_accidental_hits=remove_accidental_hits,
        partition_strategy=partition_strategy, name=name, seed=seed)
    labels = stop_gradient(labels, name="labels_stop_gradient")
    return softmax_cross_entropy_with_logits_v2(labels=labels, logits=logits)
