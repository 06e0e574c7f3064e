"""SEED_PROGRAMS.md P1–P4, as a user runs them: results and placement logs,
without a GPU, with fake GPUs (NumPy-backed, to test placement rules), and
with logical CPUs standing in for P4's towers."""

import numpy as np
import pytest

import towerflow as tf
from conftest import split_cpu

CPU = "/job:localhost/replica:0/task:0/device:CPU:{}"
GPU = "/job:localhost/replica:0/task:0/device:GPU:{}"
P1_RESULT = [[22.0, 28.0], [49.0, 64.0]]
P4_RESULT = [[44.0, 56.0], [98.0, 128.0]]
VALUES = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def build_p1():
    a = tf.constant(VALUES, shape=[2, 3], name="a")
    b = tf.constant(VALUES, shape=[3, 2], name="b")
    return tf.matmul(a, b)


def logged_lines(capsys):
    return capsys.readouterr().err.splitlines()


def run_logged(fetch, **config):
    sess = tf.Session(config=tf.ConfigProto(log_device_placement=True, **config))
    return sess.run(fetch)


# -- P1: log where ops run -------------------------------------------------------


def test_p1_without_gpu_runs_on_cpu0_and_logs_it(no_gpu, capsys):
    result = run_logged(build_p1())
    np.testing.assert_array_equal(result, P1_RESULT)
    assert result.dtype == np.float32
    lines = logged_lines(capsys)
    assert lines[0] == "Device mapping: no known devices."
    assert lines[1:] == [f"a: {CPU.format(0)}", f"b: {CPU.format(0)}",
                         f"MatMul: {CPU.format(0)}"]


def test_p1_with_a_gpu_prefers_gpu0(fake_gpus, capsys):
    fake_gpus(1)
    np.testing.assert_array_equal(run_logged(build_p1()), P1_RESULT)
    lines = logged_lines(capsys)
    assert lines[0] == "Device mapping:"
    assert lines[1] == (f"{GPU.format(0)} -> device: 0, name: NVIDIA H100 80GB HBM3, "
                        "pci bus id: 0000:1e:00.0, compute capability: 9.0")
    assert lines[2:] == [f"a: {GPU.format(0)}", f"b: {GPU.format(0)}",
                         f"MatMul: {GPU.format(0)}"]


def test_session_without_logging_is_silent(no_gpu, capsys):
    with tf.Session() as sess:
        sess.run(build_p1())
    assert capsys.readouterr().err == ""


# -- P2: pin ops by hand -----------------------------------------------------------


def test_p2_pinned_constants_on_cpu_matmul_on_gpu(fake_gpus, capsys):
    fake_gpus(1)
    with tf.device("/cpu:0"):
        a = tf.constant(VALUES, shape=[2, 3], name="a")
        b = tf.constant(VALUES, shape=[3, 2], name="b")
    c = tf.matmul(a, b)
    np.testing.assert_array_equal(run_logged(c), P1_RESULT)
    ops = [line for line in logged_lines(capsys) if not line.startswith(("Device", "/job"))]
    assert ops == [f"a: {CPU.format(0)}", f"b: {CPU.format(0)}", f"MatMul: {GPU.format(0)}"]


def test_p2_nested_scopes_merge_and_none_clears(no_gpu):
    with tf.device("/job:localhost/replica:0"):
        with tf.device("/cpu:0"):
            a = tf.constant(1.0, name="a")
            with tf.device(None):
                free = tf.constant(2.0, name="free")
    assert a.device == "/job:localhost/replica:0/device:CPU:0"
    assert free.device == ""
    assert tf.Session().run(a + free) == 3.0


# -- P3: a device that does not exist --------------------------------------------------


def build_p3():
    with tf.device("/gpu:2"):
        return build_p1()


@pytest.mark.parametrize("gpus", [0, 1])
def test_p3_missing_device_error_names_op_spec_and_devices(fake_gpus, gpus):
    fake_gpus(gpus) if gpus else None
    c = build_p3()
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        tf.Session().run(c)
    message = str(caught.value)
    assert "Cannot assign a device for operation 'a'" in message
    assert "Could not satisfy explicit device specification '/device:GPU:2'" in message
    assert CPU.format(0) in message
    assert (GPU.format(0) in message) == bool(gpus)
    assert caught.value.op.name == "a"


def test_p3_soft_placement_falls_back_to_cpu0(no_gpu, capsys):
    result = run_logged(build_p3(), allow_soft_placement=True)
    np.testing.assert_array_equal(result, P1_RESULT)
    assert f"MatMul: {CPU.format(0)}" in logged_lines(capsys)


def test_p3_soft_placement_falls_back_to_gpu0(fake_gpus, capsys):
    fake_gpus(1)
    np.testing.assert_array_equal(run_logged(build_p3(), allow_soft_placement=True),
                                  P1_RESULT)
    lines = logged_lines(capsys)
    assert f"a: {GPU.format(0)}" in lines and f"MatMul: {GPU.format(0)}" in lines


# -- P4: several towers, summed on the CPU ---------------------------------------------


def build_p4(devices):
    c = []
    for d in devices:
        with tf.device(d):
            a = tf.constant(VALUES, shape=[2, 3])
            b = tf.constant(VALUES, shape=[3, 2])
            c.append(tf.matmul(a, b))
    with tf.device("/cpu:0"):
        total = tf.add_n(c)
    return total


def test_p4_on_four_logical_cpus(no_gpu, capsys):
    split_cpu(4)
    result = run_logged(build_p4(["/cpu:2", "/cpu:3"]))
    np.testing.assert_array_equal(result, P4_RESULT)
    lines = logged_lines(capsys)
    assert f"MatMul: {CPU.format(2)}" in lines
    assert f"MatMul_1: {CPU.format(3)}" in lines
    assert f"AddN: {CPU.format(0)}" in lines


def test_p4_each_tower_on_its_own_logical_cpu(no_gpu, capsys):
    split_cpu(4)
    towers = [f"/cpu:{i}" for i in range(4)]
    result = run_logged(build_p4(towers))
    np.testing.assert_array_equal(result, np.multiply(P1_RESULT, 4))
    lines = logged_lines(capsys)
    for i, name in enumerate(["MatMul", "MatMul_1", "MatMul_2", "MatMul_3"]):
        assert f"{name}: {CPU.format(i)}" in lines


def test_p4_as_written_on_four_logical_gpus(fake_gpus, capsys):
    fake_gpus(1)
    gpus = tf.config.list_physical_devices("GPU")
    tf.config.set_visible_devices(gpus[0], "GPU")
    tf.config.experimental.set_virtual_device_configuration(
        gpus[0], [tf.config.experimental.VirtualDeviceConfiguration(memory_limit=1024)] * 4)
    result = run_logged(build_p4(["/gpu:2", "/gpu:3"]))
    np.testing.assert_array_equal(result, P4_RESULT)
    lines = logged_lines(capsys)
    assert f"MatMul: {GPU.format(2)}" in lines and f"MatMul_1: {GPU.format(3)}" in lines
    assert f"AddN: {CPU.format(0)}" in lines
    mapping = [line for line in lines if line.startswith("/job")]
    assert len(mapping) == 4 and all("-> device: 0," in line for line in mapping)


def test_p4_without_those_devices_errors_or_soft_places(no_gpu):
    total = build_p4(["/gpu:2", "/gpu:3"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="/device:GPU:2"):
        tf.Session().run(total)
    soft = tf.Session(config=tf.ConfigProto(allow_soft_placement=True))
    np.testing.assert_array_equal(soft.run(total), P4_RESULT)
