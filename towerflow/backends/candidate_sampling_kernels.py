"""CPU kernels of the candidate samplers and of compute_accidental_hits
(towerflow/ops/candidate_sampling_ops.py), after TensorFlow 1.15's
range_sampler.cc and candidate_sampler_ops.cc."""

import math

import numpy as np

from .. import errors

_FLOAT_MAX = float(np.finfo(np.float32).max)


def build_candidate_sampling_kernels():
    return {"CandidateSampler": _candidate_sampler,
            "ComputeAccidentalHits": lambda ctx: _accidental_hits}


class _LogUniform:
    def __init__(self, range_max):
        self.range_max, self.log_range = range_max, math.log1p(range_max)

    def sample(self, rng, count):
        values = np.exp(rng.random(count) * self.log_range).astype(np.int64) - 1
        return values % self.range_max     # TF's guard against round-off

    def probability(self, values):
        values = values.astype(np.float64)
        return np.log((values + 2.0) / (values + 1.0)) / self.log_range


class _Uniform:
    def __init__(self, range_max):
        self.range_max = range_max

    def sample(self, rng, count):
        return rng.integers(0, self.range_max, size=count, dtype=np.int64)

    def probability(self, values):
        return np.full(values.shape, 1.0 / self.range_max)


def _candidate_sampler(ctx):
    attrs = ctx.attrs
    seed = None if attrs["seed"][0] is None else list(attrs["seed"])
    rng = ctx.resource(("random", ctx.op), lambda: np.random.default_rng(seed))
    sampler = (_LogUniform if attrs["sampler"] == "log_uniform" else _Uniform)(
        attrs["range_max"])
    num_sampled, unique = attrs["num_sampled"], attrs["unique"]

    def sample(true_classes):
        if true_classes.ndim != 2 or true_classes.shape[1] != attrs["num_true"]:
            raise errors.InvalidArgumentError(
                None, ctx.op, f"true_classes must be a matrix with {attrs['num_true']} "
                f"columns, got shape {list(true_classes.shape)}")
        if unique and num_sampled > attrs["range_max"]:
            raise errors.InvalidArgumentError(None, ctx.op, "Sampler's range is too small.")
        sampled, tries = (_unique_draw if unique else _draw)(sampler, rng, num_sampled)
        true_count = _expected_count(sampler.probability(true_classes), num_sampled, tries)
        sampled_count = _expected_count(sampler.probability(sampled), num_sampled, tries)
        return sampled, true_count.astype(np.float32), sampled_count.astype(np.float32)
    return sample


def _draw(sampler, rng, count):
    return sampler.sample(rng, count), count


def _unique_draw(sampler, rng, count):
    """TF's rejection loop: draw until ``count`` distinct classes, counting tries."""
    picked, seen, tries = [], set(), 0
    while len(picked) < count:
        for value in sampler.sample(rng, max(count - len(picked), 16)).tolist():
            tries += 1
            if value not in seen:
                seen.add(value)
                picked.append(value)
                if len(picked) == count:
                    break
    return np.array(picked, dtype=np.int64), tries


def _expected_count(probability, batch_size, tries):
    """range_sampler.cc's ExpectedCountHelper."""
    if tries == batch_size:
        return probability * batch_size
    return -np.expm1(tries * np.log1p(-probability))


def _accidental_hits(true_classes, sampled):
    position = {value: index for index, value in enumerate(sampled.tolist())}
    rows, ids = [], []
    for row, classes in enumerate(true_classes.tolist()):
        for value in classes:
            if value in position:
                rows.append(row)
                ids.append(position[value])
    return (np.array(rows, dtype=np.int32), np.array(ids, dtype=np.int64),
            np.full(len(rows), -_FLOAT_MAX, dtype=np.float32))
