"""A pytest plugin: run one shard of the collected tests, so that
benchmarks/gpu_check.sh runs the GPU group in several processes at once on
one GPU (a cold kernel cache makes the group compile-bound, on the host):

    GPU_CHECK_SHARD=2/4 python -m pytest -p gpu_check_shard -m gpu tests

keeps every fourth test from the second on (in collection order, so the
shards are balanced file by file) and deselects the others. Without
GPU_CHECK_SHARD it does nothing.
"""

import os

import pytest

VARIABLE = "GPU_CHECK_SHARD"


def shard_of(value):
    """'2/4' -> (1, 4): the 0-based shard and the count; ValueError if malformed."""
    index, _, count = value.partition("/")
    index, count = int(index), int(count)
    if not 1 <= index <= count:
        raise ValueError(f"{VARIABLE} must be I/N with 1 <= I <= N, got {value!r}")
    return index - 1, count


@pytest.hookimpl(trylast=True)          # after -m and -k: shards of what runs
def pytest_collection_modifyitems(config, items):
    value = os.environ.get(VARIABLE, "").strip()
    if not value:
        return
    index, count = shard_of(value)
    kept = [item for position, item in enumerate(items) if position % count == index]
    dropped = [item for position, item in enumerate(items) if position % count != index]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept
