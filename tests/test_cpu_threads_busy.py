"""The CPU pool on a busy machine (issue 31, item 4): one threading layer at a
time (BLAS on one thread inside the pool's parts, and given its threads back
only while the cores are free), idle threads that sleep instead of spinning,
and TOWERFLOW_CPU_THREADS=1 meaning one thread, BLAS's included.
benchmarks/busy_machine.py measures the CPU seconds this saves."""

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from towerflow.backends import cpu_threads, native
from towerflow.device import host

threadpoolctl = pytest.importorskip("threadpoolctl")


def blas_thread_counts():
    """What threadpoolctl sees: the thread count of every BLAS loaded."""
    return [lib["num_threads"] for lib in threadpoolctl.threadpool_info()
            if lib["user_api"] == "blas"]


@pytest.fixture
def blas_with_threads():
    """BLAS at two threads before the test (as on any machine of 2+ cores),
    back to its own count after it."""
    if not cpu_threads.set_blas_threads(2):
        pytest.skip("no BLAS that threadpoolctl can control")
    before = cpu_threads.get_blas_threads()
    yield
    cpu_threads.set_blas_threads(max(before, 1))


@pytest.mark.parametrize("method", ["run", "run_compiled"])
def test_blas_runs_on_one_thread_inside_the_pools_parts(pool, blas_with_threads, method):
    assert blas_thread_counts() and max(blas_thread_counts()) == 2
    seen = {}
    getattr(pool, method)(lambda part: seen.setdefault(part, blas_thread_counts()), 2)
    assert sorted(seen) == [0, 1]
    assert all(counts and set(counts) == {1} for counts in seen.values()), seen


def test_a_gemm_gets_blas_threads_back_only_while_the_cores_are_free(blas_with_threads,
                                                                     monkeypatch):
    pool = cpu_threads.WorkerPool(2)
    flops = cpu_threads.MIN_PARALLEL_FLOPS
    for contended, inside in ((False, 2), (True, 1)):
        monkeypatch.setattr(pool.contention, "contended", lambda c=contended: c)
        with pool.blas_threads(flops):
            assert set(blas_thread_counts()) == {inside}
        assert set(blas_thread_counts()) == {1}
    with pool.blas_threads(flops - 1):          # small: never
        assert set(blas_thread_counts()) == {1}


def test_one_worker_holds_blas_to_one_thread_too(blas_with_threads):
    pool = cpu_threads.WorkerPool(1)
    with pool.blas_threads(1 << 40):
        assert set(blas_thread_counts()) == {1}
    assert set(blas_thread_counts()) == {1}


def test_towerflow_cpu_threads_1_runs_a_session_with_blas_on_one_thread():
    program = (
        "import numpy as np, towerflow as tf, threadpoolctl\n"
        "from towerflow.backends import cpu_threads\n"
        "cpu_threads.set_blas_threads(2)\n"
        "a = tf.constant(np.ones((300, 300), np.float32))\n"
        "with tf.Session() as sess:\n"
        "    sess.run(tf.matmul(a, a))\n"
        "print([l['num_threads'] for l in threadpoolctl.threadpool_info()\n"
        "       if l['user_api'] == 'blas'])\n")
    # the product on OpenBLAS (no compiled GEMM), as on a CPU with no vector path
    env = dict(os.environ, TOWERFLOW_CPU_THREADS="1", TOWERFLOW_NATIVE="0")
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out.split("\n")[-2] == "[1]", out


class FakeClock:
    def __init__(self):
        self.now, self.waited = 100.0, 0.0

    def advance(self, seconds, waiting_fraction):
        self.now += seconds
        self.waited += seconds * waiting_fraction


def test_contention_is_the_run_queue_wait_per_second_and_holds_a_while(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(cpu_threads.time, "monotonic", lambda: clock.now)
    monkeypatch.setattr(cpu_threads, "run_queue_wait_s", lambda: clock.waited)
    contention = cpu_threads.Contention()
    threshold = contention.THRESHOLD
    window = contention.WINDOW_S * 1.01
    assert not contention.contended()                      # the first look: a baseline
    clock.advance(window, threshold / 2)
    assert not contention.contended()
    clock.advance(window / 2, 1.0)                         # within the window: no new look
    assert not contention.contended()
    clock.advance(window / 2, 1.0)                         # 3/4 of the window waited
    assert contention.contended()
    clock.advance(contention.HOLD_S / 2, 0.0)             # held, though the cores are free
    assert contention.contended()
    clock.advance(contention.HOLD_S * 0.51, 0.0)
    assert not contention.contended()


def test_contention_is_seen_beside_cpu_bound_neighbours():
    if cpu_threads.run_queue_wait_s() is None:
        pytest.skip("no /proc/self/task/*/schedstat")
    neighbours = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                  for _ in range(host.usable_cores() + 1)]
    try:
        contention, seen, deadline = cpu_threads.Contention(), False, time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            sum(range(10000))                            # runnable, beside them
            seen = contention.contended()
    finally:
        for process in neighbours:
            process.kill()
            process.wait()
    assert seen


def thread_cpu_seconds():
    """{thread id: CPU seconds} of this process's threads (Linux)."""
    ticks = os.sysconf("SC_CLK_TCK")
    seconds = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seconds[int(task)] = (int(fields[11]) + int(fields[12])) / ticks
    return seconds


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
@pytest.mark.skipif(not native.available(), reason="no compiled kernels")
def test_idle_threads_sleep_instead_of_spinning(blas_with_threads):
    # every kind of thread towerflow makes work: the C threads (run_parts), the
    # pool's Python threads, OpenBLAS's threads (a big product on two threads)
    pool = cpu_threads.WorkerPool(2)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, 16)).astype(np.float32)
    coefficients = rng.standard_normal((3, 16)).astype(np.float32)
    out = np.empty_like(x)
    for _ in range(200):
        native.run_parts(lambda part: native.batch_norm_apply(
            (4096, 16, 2048 * part, 2048 * (part + 1)), x, coefficients, out, False), 2, 2)
        pool.run(lambda part: np.add(x, 1.0), 2)
    with pool.blas_threads(1 << 40):
        cpu_threads.set_blas_threads(2)             # whatever the machine's contention
        a = rng.standard_normal((512, 512)).astype(np.float32)
        for _ in range(20):
            a @ a
    time.sleep(0.5)                               # past every spin (OpenBLAS's ~0.1 s)
    caller = threading.get_native_id()
    before = thread_cpu_seconds()
    time.sleep(1.0)
    after = thread_cpu_seconds()
    others = {task: after[task] - before.get(task, 0.0) for task in after if task != caller}
    assert sum(others.values()) < 0.1, others     # a spinning thread: ~1 s
