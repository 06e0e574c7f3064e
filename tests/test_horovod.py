"""towerflow.horovod: Horovod's TF1 API. Programs written in the manner of
Horovod's own TF1 examples (tests/horovod_programs/) run under `towerflow
launch -n 2` and end with the weights of one process trained alone on the
same global batches; the collectives match NumPy; a process alone is rank 0
of 1; errors are Horovod's.

Tolerances. Two ranks average their batch means (m0 + m1) / 2 where one
process takes the mean of the whole batch: the same sums in another order,
so every gradient element differs by a few float32 roundings (relative
~1e-7 each, ~log2(batch) of them). Over six updates that stays below 1e-5
of each tensor's largest element, the bound test_mpi.py uses for towers.
Both ranks add the same two numbers (MPI's sum of two addends), so they end
bit-identical. fp16 compression rounds each rank's gradient to float16 and
their sum again (2 x 2^-11 relative, about 1e-3): the weights differ from the
float32 run by more than float32 rounding and less than 2e-3.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import towerflow as tf
import towerflow.horovod as hvd
from towerflow import errors

PROGRAMS = Path(__file__).parent / "horovod_programs"
sys.path.insert(0, str(PROGRAMS))
from collective_inputs import dense_input, indexed_rows, ragged_rows

FLOAT32_ORDER = 1e-5
FP16_COMPRESSION = 2e-3


@pytest.fixture(autouse=True)
def horovod_shut_down(no_gpu):
    """Every test starts (and leaves) Horovod uninitialised."""
    hvd.shutdown()
    yield
    hvd.shutdown()


def run_program(program, out_dir, *args, ranks=2):
    """The program under `towerflow launch -n ranks` (ranks=0: alone)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    line = [sys.executable, str(PROGRAMS / program), str(out_dir), *args]
    if ranks:
        line = [sys.executable, "-m", "towerflow", "launch", "-n", str(ranks), "--", *line]
    # NOTE: on the CPU: two ranks on a host with one GPU would list GPU 1 in
    # visible_device_list, which TF (and towerflow) refuse
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=os.pathsep.join(
        [str(Path(tf.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(line, capture_output=True, text=True, timeout=240, env=env,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return [np.load(out_dir / f"rank_{rank}.npz") for rank in range(max(ranks, 1))]


def weights(result):
    return {name: result[name] for name in result.files if "/" in name}


def relative_difference(ours, reference):
    return max(np.max(np.abs(ours[name] - reference[name])) / np.max(np.abs(reference[name]))
               for name in reference)


def assert_ranks_identical(results):
    for name, value in weights(results[0]).items():
        for other in results[1:]:
            assert np.array_equal(value, other[name]), name


def ranks_and_alone(program, tmp_path, *args):
    """(each rank's result on two ranks, identical across ranks; the weights
    of one process on the global batch) of ``program`` with ``args``."""
    reference = weights(run_program(program, tmp_path / "alone", "--as-ranks", "2", *args,
                                    ranks=0)[0])
    ranks = run_program(program, tmp_path / "job", *args)
    assert_ranks_identical(ranks)
    return ranks, reference


# -- Horovod's examples, in towerflow's words, on two ranks ---------------------------


def test_mnist_style_program_on_two_ranks_matches_one_process(tmp_path):
    ranks, reference = ranks_and_alone("mnist_style.py", tmp_path)
    assert relative_difference(weights(ranks[0]), reference) <= FLOAT32_ORDER
    facts = [{key: int(result[key]) for key in ("rank", "size", "local_rank", "local_size",
                                                "cross_rank", "cross_size", "global_step")}
             for result in ranks]
    assert facts == [{"rank": r, "size": 2, "local_rank": r, "local_size": 2, "cross_rank": 0,
                          "cross_size": 1, "global_step": 6} for r in (0, 1)]
    assert (tmp_path / "job" / "checkpoints").is_dir()     # rank 0 checkpoints


def test_backward_passes_per_step_2_on_two_ranks_equals_the_big_batch(tmp_path):
    ranks, reference = ranks_and_alone("mnist_style.py", tmp_path, "--passes", "2")
    assert relative_difference(weights(ranks[0]), reference) <= FLOAT32_ORDER
    # global_step counts every backward pass, as Horovod's does
    assert [int(r["global_step"]) for r in ranks] == [12, 12]


def test_benchmark_style_program_with_and_without_fp16_compression(tmp_path):
    ranks, reference = ranks_and_alone("benchmark_style.py", tmp_path)
    assert relative_difference(weights(ranks[0]), reference) <= FLOAT32_ORDER
    compressed = run_program("benchmark_style.py", tmp_path / "fp16", "--fp16-allreduce")
    assert_ranks_identical(compressed)
    difference = relative_difference(weights(compressed[0]), reference)
    assert FLOAT32_ORDER < difference <= FP16_COMPRESSION
    report = (tmp_path / "job" / "report.txt").read_text()
    assert "Number of CPUs: 2" in report and "Img/sec per CPU" in report


def test_collectives_on_two_ranks_match_numpy(tmp_path):
    ranks = run_program("collectives.py", tmp_path)
    inputs = [dense_input(rank) for rank in (0, 1)]
    total = inputs[0] + inputs[1]
    half16 = [value.astype(np.float16) for value in inputs]
    (values_0, indices_0), (values_1, indices_1) = indexed_rows(0), indexed_rows(1)
    for result in ranks:
        np.testing.assert_array_equal(result["sum"], total)
        np.testing.assert_array_equal(result["average"], total / np.float32(2))
        # float16 on the wire: each input and their sum rounded to float16
        np.testing.assert_array_equal(result["average_fp16"],
                                      (half16[0] + half16[1]).astype(np.float32) / 2)
        assert result["average_fp16"].dtype == np.float32
        np.testing.assert_array_equal(result["integer_sum"], [3, 10])
        np.testing.assert_array_equal(result["gathered"],
                                      np.concatenate([ragged_rows(0), ragged_rows(1)]))
        np.testing.assert_array_equal(result["broadcast"], inputs[1])
        assert result["broadcast_scalar"].shape == () and result["broadcast_scalar"] == 1.5
        np.testing.assert_array_equal(result["slices_values"],
                                      np.concatenate([values_0, values_1]) / 2)
        np.testing.assert_array_equal(result["slices_indices"],
                                      np.concatenate([indices_0, indices_1]))


# -- a process alone ------------------------------------------------------------------


def test_a_process_alone_is_rank_0_of_1():
    hvd.init()
    assert (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size()) == (0, 1, 0, 1)
    assert (hvd.cross_rank(), hvd.cross_size(), hvd.is_homogeneous()) == (0, 1, True)
    assert not hvd.mpi_enabled() and not hvd.mpi_threads_supported()
    value = np.array([[1.5, -2.25], [3.0, 0.125]], np.float32)
    with tf.Session() as sess:
        out = sess.run([hvd.allreduce(value), hvd.allreduce(value, op=hvd.Sum),
                        hvd.allgather(value), hvd.broadcast(value, 0)])
    for result in out:
        np.testing.assert_array_equal(result, value)


def accumulated_training(passes, average, batches, learning_rate=0.1):
    """Weights of a linear least-squares model after SGD over ``batches``
    with DistributedOptimizer(backward_passes_per_step=passes) in a process
    alone: passes micro-batches per update."""
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None, 3])
    y = tf.placeholder(tf.float32, [None])
    w = tf.Variable(np.array([0.5, -1.0, 2.0], np.float32))
    loss = tf.reduce_mean(tf.square(tf.reduce_sum(x * w, axis=1) - y))
    opt = hvd.DistributedOptimizer(tf.train.GradientDescentOptimizer(learning_rate),
                                   backward_passes_per_step=passes,
                                   average_aggregated_gradients=average)
    step = tf.train.get_or_create_global_step()
    train_op = opt.minimize(loss, global_step=step)
    history = []
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(tf.local_variables_initializer())
        for features, targets in batches:
            sess.run(train_op, {x: features, y: targets})
            history.append(sess.run(w))
        return history, sess.run(step)


def big_batch_sgd(batches, passes, learning_rate):
    """The float64 reference: one SGD step per ``passes`` micro-batches, on
    their union's mean squared error."""
    w = np.array([0.5, -1.0, 2.0])
    for start in range(0, len(batches), passes):
        features = np.concatenate([b[0] for b in batches[start:start + passes]]).astype(float)
        targets = np.concatenate([b[1] for b in batches[start:start + passes]]).astype(float)
        w = w - learning_rate * 2 * features.T @ (features @ w - targets) / len(targets)
    return w


@pytest.mark.parametrize("average", [True, False], ids=["averaged", "summed"])
def test_backward_passes_per_step_equals_one_step_on_the_big_batch(average):
    hvd.init()
    rng = np.random.RandomState(3)
    batches = [(rng.randn(4, 3).astype(np.float32), rng.randn(4).astype(np.float32))
               for _ in range(6)]
    history, global_step = accumulated_training(2, average, batches)
    assert global_step == 6
    np.testing.assert_array_equal(history[0], [0.5, -1.0, 2.0])    # no update on pass 1
    np.testing.assert_array_equal(history[2], history[1])             # nor on pass 3
    # summed over the passes, not averaged: twice the mean gradient, as a
    # doubled learning rate (Horovod's average_aggregated_gradients=False)
    rate = 0.1 if average else 0.2
    np.testing.assert_allclose(history[-1], big_batch_sgd(batches, 2, rate), rtol=2e-6,
                               atol=2e-6)
    np.testing.assert_allclose(history[1], big_batch_sgd(batches[:2], 2, rate), rtol=2e-6,
                               atol=2e-6)


# -- errors as Horovod's --------------------------------------------------------------


@pytest.mark.parametrize("call", [hvd.rank, hvd.size, hvd.local_rank, hvd.local_size,
                                  hvd.cross_rank, hvd.cross_size,
                                  lambda: hvd.allreduce(tf.constant([1.0])),
                                  lambda: hvd.allgather(tf.constant([1.0])),
                                  lambda: hvd.broadcast(tf.constant([1.0]), 0),
                                  lambda: hvd.broadcast_global_variables(0)])
def test_using_horovod_before_init_is_a_value_error(call):
    with pytest.raises(ValueError, match=r"^Horovod has not been initialized; use "
                                         r"hvd\.init\(\)\.$"):
        call()


def test_an_op_run_after_shutdown_is_a_failed_precondition():
    hvd.init()
    total = hvd.allreduce(tf.constant([1.0]))
    hvd.shutdown()
    with tf.Session() as sess, pytest.raises(errors.FailedPreconditionError,
                                             match=r"Horovod has not been initialized"):
        sess.run(total)


def test_bad_arguments_name_what_was_expected():
    hvd.init()
    x = tf.constant([1.0, 2.0])
    with pytest.raises(ValueError, match="The op parameter supersedes average"):
        hvd.allreduce(x, average=True, op=hvd.Sum)
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.allreduce(x, op=hvd.Adasum)
    with pytest.raises(ValueError, match=r"root_rank=1\).*0\.\.0"):
        hvd.broadcast(x, root_rank=1)
    with pytest.raises(ValueError, match="scalar"):
        hvd.allgather(tf.constant(1.0))
    with pytest.raises(ValueError, match="backward_passes_per_step must be > 0"):
        hvd.DistributedOptimizer(tf.train.GradientDescentOptimizer(0.1),
                                 backward_passes_per_step=0)
    with pytest.raises(ValueError, match="doesn't inherit"):
        hvd.DistributedOptimizer(object())
    with pytest.warns(DeprecationWarning, match="replaced with `op`"):
        hvd.allreduce(x, average=False)


# -- the visible_device_list idiom ----------------------------------------------------


@pytest.fixture
def two_simulated_gpus(monkeypatch):
    """Two simulated GPUs, even beside a real one (these tests need two)."""
    from conftest import release_gpu_backend, use_gpu_backend
    yield use_gpu_backend(2, monkeypatch, simulated=True)
    release_gpu_backend()


def test_visible_device_list_gives_the_listed_gpu_as_gpu_0(two_simulated_gpus):
    from towerflow.simgpu import state
    config = tf.ConfigProto()
    config.gpu_options.visible_device_list = "1"
    with tf.device("/gpu:0"):
        doubled = tf.constant([1.0, 2.0]) * 2.0
    with tf.Session(config=config) as sess:
        gpus = [d for d in sess.list_devices() if d.device_type == "GPU"]
        assert [(d.short_name, d.gpu.index) for d in gpus] == [("/device:GPU:0", 1)]
        np.testing.assert_array_equal(sess.run(doubled), [2.0, 4.0])
    assert state.pools_of(1) and not state.pools_of(0)   # nothing landed on GPU 0
    swapped = tf.ConfigProto()
    swapped.gpu_options.visible_device_list = "1,0"
    with tf.Session(config=swapped) as sess:
        assert [(d.short_name, d.gpu.index) for d in sess.list_devices()
                if d.device_type == "GPU"] == [("/device:GPU:0", 1), ("/device:GPU:1", 0)]


@pytest.mark.parametrize("listed, message", [
    ("2", "'visible_device_list' listed an invalid GPU id '2' but visible device count is 2"),
    ("0,x", "Could not parse entry in 'visible_device_list': 'x'. visible_device_list = 0,x"),
    ("1,1", "visible_device_list contained a duplicate entry: 1,1"),
])
def test_a_bad_visible_device_list_is_tensorflows_error(two_simulated_gpus, listed, message):
    config = tf.ConfigProto(gpu_options=tf.GPUOptions(visible_device_list=listed))
    with pytest.raises(errors.InvalidArgumentError) as raised:
        tf.Session(config=config)
    assert message in str(raised.value)


def test_visible_device_list_is_ignored_without_gpus():
    config = tf.ConfigProto()
    config.gpu_options.visible_device_list = "1"     # local rank 1 on a CPU-only host
    with tf.Session(config=config) as sess:
        assert sess.run(tf.constant(3.0) + 1.0) == 4.0


# -- import horovod.tensorflow ---------------------------------------------------------


def alias_check(tmp_path, with_real_horovod):
    script = ("import towerflow.horovod as ours\n"
              "ours.install_alias()\n"
              "import horovod.tensorflow as hvd\n"
              "assert hvd is ours and hvd.DistributedOptimizer is ours.DistributedOptimizer\n")
    path = [str(Path(tf.__file__).parents[1])]
    if with_real_horovod:
        (tmp_path / "horovod").mkdir()
        (tmp_path / "horovod" / "__init__.py").write_text("")
        path.append(str(tmp_path))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


def test_install_alias_serves_import_horovod_tensorflow(tmp_path):
    done = alias_check(tmp_path, with_real_horovod=False)
    assert done.returncode == 0, done.stderr


def test_install_alias_leaves_a_real_horovod_alone(tmp_path):
    done = alias_check(tmp_path, with_real_horovod=True)
    assert done.returncode != 0
    assert "ImportError: install_alias(): a real Horovod is installed" in done.stderr
