"""Shared fixtures: a fresh default graph and device configuration for every
test, logical CPUs standing in for towers, and fake GPUs for placement tests."""

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import towerflow as tf
from towerflow import backends, simgpu
from towerflow.backends import cpu_threads, numpy_backend
from towerflow.device import physical, runtime
from towerflow.device.physical import GpuInfo

# NOTE: a suite started in the background of a script (`bash .ci/run &`, nohup)
# inherits SIGINT ignored, and so would every `towerflow train` it starts; since
# a run keeps an inherited SIG_IGN (run_control.StopSignals), the tests that
# interrupt runs with SIGINT need it caught again here (children then get the
# default disposition).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
from towerflow.graph import registry

N_LOGICAL_CPUS = 4
# The suites compare GPU results with the NumPy kernels at float32 tolerances:
# float32 GEMMs in full float32, not TF32 (see towerflow/backends/cupy_tf32.py).
os.environ["TOWERFLOW_TF32"] = "0"
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"   # ../shared/data


@pytest.fixture(autouse=True)
def fresh_state():
    """Every test starts from a new default graph and unconfigured devices."""
    tf.reset_default_graph()
    runtime.reset()
    yield
    tf.reset_default_graph()
    runtime.reset()
    physical.set_gpu_probe(None)


@pytest.fixture
def no_gpu():
    """Pretend the machine has no GPU, even where one is present."""
    physical.set_gpu_probe(lambda: ([], "no GPU (test)"))


def split_cpu(count=N_LOGICAL_CPUS):
    """Split the CPU into ``count`` logical CPUs (/cpu:0 .. /cpu:count-1)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * count)


def real_gpu_present():
    """Whether CuPy sees a working GPU (asked once per test run)."""
    if not _REAL_GPU:
        physical.set_gpu_probe(None)
        _REAL_GPU.append(bool(physical.probe_gpus()[0]))
    return _REAL_GPU[0]


_REAL_GPU = []


def devices_under_test():
    """The devices the op suites run every case on: the four logical CPUs
    always, and /gpu:0 (marked ``gpu``): a real GPU where one is present,
    else the simulated GPU (towerflow.simgpu)."""
    cpus = [pytest.param(f"/cpu:{i}", id=f"cpu{i}") for i in range(N_LOGICAL_CPUS)]
    return cpus + [pytest.param("/gpu:0", id="gpu0", marks=pytest.mark.gpu)]


@contextlib.contextmanager
def gpu_registration_kept():
    """On exit, the GPU kernels and backend registered as they were on entry.
    NOTE: the CuPy backend registers itself once, when first imported: a
    fixture that leaves it unregistered breaks every later GPU case."""
    saved = gpu_registration()
    try:
        yield
    finally:
        restore_gpu_registration(saved)


def gpu_registration():
    return registry.registered_kernels("GPU"), backends.registered_backend("GPU")


def restore_gpu_registration(saved):
    kernels, factory = saved
    registry.unregister_kernels("GPU")
    backends.unregister_backend("GPU")
    if kernels is not None:
        registry.register_kernels("GPU", kernels)
    if factory is not None:
        backends.register_backend("GPU", factory)


_SAVED_GPU_REGISTRATIONS = []


def use_gpu_backend(simulated_gpus=1, monkeypatch=None, simulated=None):
    """Serve GPUs with the CuPy backend: on the real GPU where one is present,
    else on ``simulated_gpus`` simulated GPUs (also for subprocesses, through
    TOWERFLOW_SIMULATED_GPUS when ``monkeypatch`` is given); ``simulated=True``
    simulates even beside a real GPU. Returns the backend module; undo with
    :func:`release_gpu_backend`."""
    _SAVED_GPU_REGISTRATIONS.append(gpu_registration())
    if simulated or (simulated is None and not real_gpu_present()):
        simgpu.install(gpus=simulated_gpus)
        if monkeypatch is not None:
            monkeypatch.setenv(simgpu.ENV_VARIABLE, str(simulated_gpus))
    physical.set_gpu_probe(None)
    from towerflow.backends import cupy_backend
    registry.register_kernels("GPU", cupy_backend.KERNELS)
    backends.register_backend("GPU", cupy_backend.CupyDevice)
    return cupy_backend


def release_gpu_backend():
    """The simulator removed, the GPU registration as use_gpu_backend found it."""
    if simgpu.is_installed():
        simgpu.uninstall()
    restore_gpu_registration(_SAVED_GPU_REGISTRATIONS.pop())


def pytest_collection_modifyitems(items):
    """Tests on the GPU backend are in the ``gpu`` group (``pytest -m gpu``)."""
    for item in items:
        if "gpu_backend" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture
def gpu_backend(request, monkeypatch):
    """The CuPy backend on a GPU, real or simulated (see use_gpu_backend); a
    test asks for more simulated GPUs with ``@pytest.mark.simulated_gpus(n)``."""
    marker = request.node.get_closest_marker("simulated_gpus")
    module = use_gpu_backend(marker.args[0] if marker else 1, monkeypatch)
    yield module
    release_gpu_backend()


def placed_name(device):
    """How a placement log ends for ``device``: '/cpu:2' -> 'CPU:2'."""
    spec = tf.DeviceSpec.from_string(device)
    return f"{spec.device_type}:{spec.device_index}"


@pytest.fixture(params=devices_under_test())
def op_device(request):
    """Each device of :func:`devices_under_test`, with the CPU split in four."""
    split_cpu()
    if request.param.startswith("/gpu"):
        use_gpu_backend()
        request.addfinalizer(release_gpu_backend)
    return request.param


@pytest.fixture
def logical_cpus():
    """Four logical CPUs; yields their names ['/cpu:0', ..]."""
    split_cpu()
    return [f"/cpu:{i}" for i in range(N_LOGICAL_CPUS)]


def fake_gpu(index, name="NVIDIA H100 80GB HBM3"):
    return GpuInfo(index=index, name=name, total_memory=80 * 2**30,
                   compute_capability=(9, 0), pci_bus_id=f"0000:{0x1e + index:02x}:00.0")


class FakeGpuDevice(numpy_backend.NumpyDevice):
    """A 'GPU' whose kernels are the NumPy ones: lets placement and the plan
    be tested as if GPUs were present, on a machine without one."""


def install_fake_gpus(count=1):
    """A probe reporting ``count`` GPUs, served by NumPy kernels."""
    physical.set_gpu_probe(lambda: ([fake_gpu(i) for i in range(count)], None))
    registry.register_kernels("GPU", numpy_backend.KERNELS)
    backends.register_backend("GPU", FakeGpuDevice)


@contextlib.contextmanager
def faked_gpus():
    """What the fake_gpus fixture runs: yields install_fake_gpus."""
    with gpu_registration_kept():
        yield install_fake_gpus


@pytest.fixture
def fake_gpus():
    """Install a probe reporting ``count`` GPUs, served by NumPy kernels."""
    with faked_gpus() as install:
        yield install


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def pool(monkeypatch):
    """A two-thread CPU pool (cpu_threads) that splits even a test's tiny arrays."""
    for name in ("MIN_PARALLEL_ELEMENTS", "MIN_PARALLEL_FLOPS", "MIN_SPLIT_ROWS",
                 "MIN_PART_FLOPS"):
        monkeypatch.setattr(cpu_threads, name, 1)
    blas_threads = cpu_threads.get_blas_threads()
    yield cpu_threads.WorkerPool(2)
    if blas_threads:
        cpu_threads.set_blas_threads(blas_threads)


@pytest.fixture(scope="session")
def cifar_dir(tmp_path_factory):
    """The real CIFAR-10 images in both layouts, built from ../shared/data."""
    script = DATA / "make_cifar10.py"
    if not script.is_file():
        pytest.skip(f"shared test data not found at {DATA}")
    pytest.importorskip("PIL", reason="make_cifar10.py needs Pillow")
    out = tmp_path_factory.mktemp("cifar10")
    subprocess.run([sys.executable, str(script), str(out), "--format", "both"],
                   check=True, capture_output=True)
    return out
