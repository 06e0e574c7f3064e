"""The compiled kernels' entry points refuse a None where a buffer is required,
by name, instead of reading through NULL (issue 32, item 10: six of them
segfaulted), and a geometry near PY_SSIZE_T_MAX is refused, not overflowed.

Every entry point a training step of the cifar10 network calls is recorded with
its real arguments, then called again with each array in turn replaced by None,
in a child process so that a crash fails the test instead of ending it."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from towerflow.backends import native

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "benchmarks")

CHILD = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import gpu_peers
from towerflow.backends import native

real, first_calls = native._compiled, {}

class Recorder:
    def __getattr__(self, name):
        kernel = getattr(real, name)
        def call(*args):
            first_calls.setdefault(name, args)
            return kernel(*args)
        return call

native._compiled = Recorder()
step = gpu_peers.TowerflowStep(8, "float32", "/cpu:0", False)
step.run(gpu_peers.make_batches(8)[0])
step.finish()
import towerflow as tf                # a strided conv, an unfused pool, both gradients
with tf.Graph().as_default():
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((2, 12, 12, 4)).astype(np.float32))
    w = tf.constant(rng.standard_normal((3, 3, 4, 16)).astype(np.float32))
    y = tf.nn.max_pool(tf.nn.relu(tf.nn.conv2d(x, w, [1, 2, 2, 1], "SAME")),
                       [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
    with tf.Session() as sess:
        sess.run(tf.gradients(tf.reduce_sum(y * y), [x, w]))
native._compiled = real

outcomes = []
for name, args in sorted(first_calls.items()):
    for index, arg in enumerate(args):
        if not isinstance(arg, np.ndarray):
            continue
        changed = list(args)
        changed[index] = None
        try:
            getattr(real, name)(*changed)
            outcome = "ok"
        except (TypeError, ValueError) as err:
            outcome = f"{type(err).__name__}: {err}"
        outcomes.append([name, index, outcome])
print(json.dumps(outcomes))
"""


@pytest.mark.skipif(not native.available(), reason="the compiled kernels are not running")
def test_none_for_any_buffer_is_refused_or_optional_never_a_crash():
    done = subprocess.run([sys.executable, "-c", CHILD, BENCHMARKS], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, f"the child died ({done.returncode}): {done.stderr[-2000:]}"
    outcomes = json.loads(done.stdout.splitlines()[-1])
    kernels = {name for name, _, _ in outcomes}
    assert {"max_pool", "max_pool_grad", "im2col", "col2im", "gemm", "winograd_conv",
            "winograd_grad_sums", "batch_norm_sums", "batch_norm_pool",
            "apply_update"} <= kernels, kernels
    refused = [outcome for _, _, outcome in outcomes if outcome != "ok"]
    assert all(outcome.startswith(("TypeError", "ValueError")) for outcome in refused)
    # a required buffer is named: the GEMM's b, argument 2, and its a, argument 1
    assert ["gemm", 2, "TypeError: b: expected a buffer, got None"] in outcomes
    assert ["gemm", 1, "TypeError: a: expected a float32 or float64 buffer, got None"] \
        in outcomes


@pytest.mark.skipif(not native.available(), reason="the compiled kernels are not running")
def test_a_batch_norm_geometry_near_the_largest_size_is_refused_not_overflowed():
    x = np.ones((4, 2), np.float32)
    huge = np.iinfo(np.intp).max
    with pytest.raises(ValueError, match=r"geometry \(rows, channels, block_rows, first, "
                                         r"stop\)"):
        native._compiled.batch_norm_sums((huge, 2, 2, 0, huge), x, np.zeros(2, np.float32),
                                         None, None, np.zeros((1, 2, 2)))
