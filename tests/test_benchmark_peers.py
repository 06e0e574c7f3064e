"""What the CPU peer benchmarks (benchmarks/cifar_cpu.py, benchmarks/mnist_cnn_cpu.py)
report rests on: the FLOP count per training step, peers that run the same
network (parameter counts) and really train, and rows for missing peers."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import towerflow as tf
from towerflow.recipes.cifar10 import RECIPE

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

import cifar_cpu
import mnist_cnn_cpu


def conv_flops(out_hw, window, in_channels, out_channels):
    return 2 * out_hw * out_hw * window * window * in_channels * out_channels


def test_cifar_step_flops_count_every_layer_three_times_but_the_stem_input_gradient():
    stem = conv_flops(32, 3, 3, 32)
    others = [conv_flops(32, 3, 32, 32), conv_flops(16, 3, 32, 32),
              conv_flops(16, 3, 32, 64), conv_flops(8, 3, 64, 64),
              conv_flops(8, 3, 64, 128), conv_flops(4, 3, 128, 128), 2 * 128 * 10]
    forward = stem + sum(others)
    counted = cifar_cpu.step_flops(lambda x: RECIPE.logits(x, training=True), (32, 32, 3))
    assert counted == (forward, 3 * forward - stem)


def test_mnist_step_flops_are_the_tutorial_network_s():
    first = conv_flops(28, 5, 1, 32)
    forward = first + conv_flops(14, 5, 32, 64) + 2 * 3136 * 1024 + 2 * 1024 * 10
    counted = cifar_cpu.step_flops(lambda x: mnist_cnn_cpu.logits(tf, x, 1.0), (784,))
    assert counted == (forward, 3 * forward - first)


def test_mnist_graph_is_the_classic_network_and_trains():
    step = mnist_cnn_cpu.GraphStep(tf)
    # 5*5*1*32+32 + 5*5*32*64+64 + 3136*1024+1024 + 1024*10+10: the tutorial's count
    assert step.parameters == 3_274_634
    assert _mnist_loss_falls(step, mnist_cnn_cpu.make_batches(20, count=1)[0])


def _mnist_loss_falls(step, batch):
    graph = step.sess.graph
    loss = next(op for op in graph.get_operations() if op.type == "Mean").outputs[0]
    feed = {step.images: batch[0], step.labels: batch[1], step.keep_prob: 1.0}
    before = step.sess.run(loss, feed)
    for _ in range(10):
        step.sess.run(step.train_op, feed)
    return step.sess.run(loss, feed) < 0.9 * before


def test_jax_step_trains_and_has_towerflow_s_parameter_count():
    jax = pytest.importorskip("jax")
    batch = (np.random.default_rng(0).standard_normal((8, 32, 32, 3), dtype=np.float32),
             np.arange(8) % 10)
    losses = cifar_cpu.check_jax_trains(jax, batch, steps=6)
    assert losses[-1] < 0.8 * losses[0]
    towerflow_step = cifar_cpu.gpu_peers.TowerflowStep(8, "float32", "/cpu:0", False)
    assert cifar_cpu.JaxStep(jax, 8).parameter_count() == \
        cifar_cpu.towerflow_parameter_count(towerflow_step)


def test_a_missing_peer_gets_a_not_installed_row(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)     # import torch raises ImportError
    assert cifar_cpu.import_optional("torch") is None
    row = {"batch": 64, "towerflow": {"samples_per_s": 500.0, "gflops": 80.0,
                                      "fraction_of_gemm": 0.4},
           "pytorch": None, "towerflow_over_pytorch": None}
    line = cifar_cpu._table_line(row, "pytorch")
    assert "not installed" in line and line.split()[:2] == ["64", "pytorch"]


def test_the_json_names_the_openblas_kernels_towerflow_s_gemms_ran_on():
    recorded = cifar_cpu.versions()
    assert recorded["openblas_core"] is not None
    chosen = os.environ.get("OPENBLAS_CORETYPE")
    if chosen:      # OpenBLAS runs the kernel set the variable names
        assert recorded["openblas_core"].lower() == chosen.lower()
        assert recorded["openblas_coretype_env"] == chosen


def test_isa_avx2_restarts_the_benchmark_with_every_framework_held_to_avx2():
    """--isa avx2: towerflow's GEMMs, OpenBLAS and PyTorch all on AVX2 kernels, set
    before any of them loads (a restart), and recorded in the JSON."""
    benchmarks = os.path.join(os.path.dirname(__file__), "..", "benchmarks")
    script = ("import json, sys; sys.path.insert(0, sys.argv[1]); import vector_path; "
              "vector_path.hold('avx2'); from towerflow.backends import native; "
              "print(json.dumps([vector_path.record(), native.FORCED_ISA]))")
    switches = ("TOWERFLOW_ISA", "OPENBLAS_CORETYPE", "ATEN_CPU_CAPABILITY",
                "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
    env = {name: value for name, value in os.environ.items() if name not in switches}
    done = subprocess.run([sys.executable, "-c", script, benchmarks], env=env,
                          capture_output=True, text=True, check=True, timeout=120)
    recorded, forced = json.loads(done.stdout.splitlines()[-1])
    assert recorded == {"ATEN_CPU_CAPABILITY": "avx2", "OPENBLAS_CORETYPE": "Haswell",
                        "TOWERFLOW_ISA": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                        "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    assert forced == "avx2"
