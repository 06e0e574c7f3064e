"""Faults of the GPU backend found by reading, each pinned by a test on the
strict simulated GPU (towerflow.simgpu; a real GPU where present). Each test
is named after its fault and failed before the fix."""

import numpy as np
import pytest

import towerflow as tf
from test_parallel import relative_difference, train


def split_gpu(count, memory_limit=1024):
    gpu = tf.config.list_physical_devices("GPU")[0]
    tf.config.set_logical_device_configuration(
        gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=memory_limit)] * count)


# -- fault 2: events of a copy between GPUs made on the wrong device ---------------------


@pytest.mark.simulated_gpus(2)
def test_a_value_computed_on_gpu0_is_used_on_gpu1(gpu_backend):
    with tf.device("/gpu:0"):
        x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3)) * 2.0
    with tf.device("/gpu:1"):
        y = x + 1.0
    np.testing.assert_array_equal(tf.Session().run(y),
                                  np.arange(6, dtype=np.float32).reshape(2, 3) * 2 + 1)


@pytest.mark.simulated_gpus(2)
@pytest.mark.parametrize("all_reduce", ["local", "cpu"])
def test_towers_on_two_physical_gpus_match_one_gpu(gpu_backend, all_reduce):
    reference_losses, reference = train(0, 12, device_kind="gpu")
    losses, params = train(2, 12, all_reduce=all_reduce, device_kind="gpu")
    assert relative_difference(params, reference) <= 1e-5
    np.testing.assert_allclose(losses, reference_losses, rtol=1e-5)
