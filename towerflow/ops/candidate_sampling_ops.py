"""Candidate samplers (``tf.nn.log_uniform_candidate_sampler``,
``tf.nn.uniform_candidate_sampler``) and ``tf.nn.compute_accidental_hits``, as
TensorFlow 1.15's range_sampler.cc defines them: the classes drawn, and each
class's expected count in the draw, ``p * num_sampled``, or for a ``unique``
draw that took ``n`` tries, ``1 - (1 - p)^n``. Their kernels run on the CPU,
as TensorFlow's do; a seeded sampler draws the same classes in every new
Session (not TensorFlow's stream: its Philox draws are not reproduced)::

    sampled, true_count, sampled_count = tf.nn.log_uniform_candidate_sampler(
        labels, num_true=1, num_sampled=64, unique=True, range_max=10000, seed=1)
"""

from .. import dtypes
from ..graph.registry import register_not_differentiable, register_op
from ..graph.shapes import TensorShape
from .constant_ops import convert_to_tensor
from .random_ops import get_seed


def _check_true_classes(true_classes, num_true):
    if true_classes.dtype is not dtypes.int64:
        raise TypeError(f"true_classes must be int64, got {true_classes.name} of "
                        f"{true_classes.dtype.name}")
    shape = true_classes.shape
    if shape.ndims not in (2, None):
        raise ValueError(f"true_classes must be of rank 2 ([batch_size, num_true]), got "
                         f"{true_classes.name} of shape {shape}")
    if shape.ndims == 2 and shape.dims[1] not in (None, num_true):
        raise ValueError(f"true_classes has {shape.dims[1]} columns, but num_true is "
                         f"{num_true}")


def _sampler_shape(inputs, attrs):
    (true_classes,) = inputs
    _check_true_classes(true_classes, attrs["num_true"])
    batch = true_classes.shape.dims[0] if true_classes.shape.ndims == 2 else None
    num_sampled = attrs["num_sampled"]
    return [(TensorShape([num_sampled]), dtypes.int64),
            (TensorShape([batch, attrs["num_true"]]), dtypes.float32),
            (TensorShape([num_sampled]), dtypes.float32)]


register_op("CandidateSampler", _sampler_shape, stateful=True)


def _accidental_hits_shape(inputs, attrs):
    true_classes, sampled = inputs
    _check_true_classes(true_classes, attrs["num_true"])
    if sampled.dtype is not dtypes.int64 or sampled.shape.ndims not in (1, None):
        raise TypeError(f"sampled_candidates must be an int64 vector, got {sampled.name} "
                        f"of {sampled.dtype.name} {sampled.shape}")
    return [(TensorShape([None]), dtypes.int32), (TensorShape([None]), dtypes.int64),
            (TensorShape([None]), dtypes.float32)]


register_op("ComputeAccidentalHits", _accidental_hits_shape)
register_not_differentiable("CandidateSampler", "ComputeAccidentalHits")


def _sampler(kind, true_classes, num_true, num_sampled, unique, range_max, seed, name):
    true_classes = convert_to_tensor(true_classes, dtype=dtypes.int64)
    for what, value in (("num_true", num_true), ("num_sampled", num_sampled),
                        ("range_max", range_max)):
        if int(value) < 1:
            raise ValueError(f"{what} must be >= 1, got {value}")
    attrs = {"sampler": kind, "num_true": int(num_true), "num_sampled": int(num_sampled),
             "unique": bool(unique), "range_max": int(range_max), "seed": get_seed(seed)}
    op = true_classes.graph.create_op("CandidateSampler", [true_classes], attrs,
                                      name=name or f"{kind.title().replace('_', '')}"
                                      "CandidateSampler")
    return tuple(op.outputs)


def log_uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max,
                                  seed=None, name=None):
    """``num_sampled`` classes in [0, range_max) drawn with Zipf's
    ``P(class) = log((class + 2) / (class + 1)) / log(range_max + 1)`` (distinct
    ones if ``unique``); returns (sampled_candidates int64 [num_sampled],
    true_expected_count float32 [batch, num_true], sampled_expected_count
    float32 [num_sampled]).
    ``tf.nn.log_uniform_candidate_sampler(labels, 1, 5, True, 100, seed=3)``."""
    return _sampler("log_uniform", true_classes, num_true, num_sampled, unique, range_max,
                    seed, name)


def uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max,
                              seed=None, name=None):
    """As log_uniform_candidate_sampler with ``P(class) = 1 / range_max``:
    ``tf.nn.uniform_candidate_sampler(labels, 1, 5, True, 100, seed=3)``."""
    return _sampler("uniform", true_classes, num_true, num_sampled, unique, range_max,
                    seed, name)


def compute_accidental_hits(true_classes, sampled_candidates, num_true, seed=None,
                            name=None):
    """Where a sampled class is one of the row's true classes: (indices int32:
    the rows, ids int64: the positions in ``sampled_candidates``, weights
    float32: -FLT_MAX each), to be added to the sampled logits.
    ``tf.nn.compute_accidental_hits(labels, sampled, num_true=1)``."""
    true_classes = convert_to_tensor(true_classes, dtype=dtypes.int64)
    sampled_candidates = convert_to_tensor(sampled_candidates, dtype=dtypes.int64)
    op = true_classes.graph.create_op(
        "ComputeAccidentalHits", [true_classes, sampled_candidates],
        {"num_true": int(num_true)}, name=name or "ComputeAccidentalHits")
    return tuple(op.outputs)
