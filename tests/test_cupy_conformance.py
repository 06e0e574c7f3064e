"""towerflow's CuPy usage against the installed CuPy. CI installs the real
CuPy 14 (the cuda12 extra) on machines without a GPU: its API can be
inspected there, its kernels cannot run.

- Every CuPy name the GPU code uses (found statically, tests/cupy_uses.py)
  must exist in the installed CuPy and bind every call's arguments: one
  test per name, its id the dotted name (tests/cupy_api.py checks).
- Behaviour towerflow relies on, as far as it can be shown without a GPU.
- Every name the simulated CuPy (towerflow/simgpu) offers must exist in the
  real CuPy with a compatible signature.

The whole file skips without CuPy.
"""

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import cupy_api
import numpy as np
import pytest
from cupy_uses import checked_cupy_names, walk_modules

cupy = pytest.importorskip("cupy", reason="the CuPy conformance checks need CuPy "
                                          "(pip install 'towerflow[cuda12]')")
if not hasattr(cupy, "__file__"):
    pytest.skip("the simulated CuPy is in place of CuPy (TOWERFLOW_SIMULATED_GPUS?); these "
                "checks are against the real one", allow_module_level=True)

from towerflow import backends
from towerflow.backends import numpy_backend
from towerflow.graph import registry
from towerflow.simgpu import modules as simgpu_modules

ROOT = Path(__file__).resolve().parents[1]
# All of towerflow but the simulator (checked against CuPy below, as a whole).
GPU_CODE = sorted(path for path in (ROOT / "towerflow").rglob("*.py")
                  if "simgpu" not in path.parts)
# Modules whose CuPy uses must be found (a walk that loses one fails).
# plan_capture.py is walked too, but names no CuPy: it asks the runtime to capture.
GPU_MODULES = ["towerflow/backends/cupy_backend.py", "towerflow/backends/cupy_graphs.py",
               "towerflow/parallel/nccl.py",
               "towerflow/device/physical.py", "towerflow/cli_train.py",
               "towerflow/backends/kernels.py"]
# Variables whose CuPy class the walk cannot see, by (module, name).
HINTS = {
    # GraphReplayer.stage: the graph's input buffer, and the event of the last
    # copy out of its pinned staging buffer (unpacked from a dict).
    ("towerflow/backends/cupy_graphs.py", "buffer"): "cupy.ndarray",
    ("towerflow/backends/cupy_graphs.py", "copied"): "cupy.cuda.Event",
    # capture, replay: the primary runtime's stream (``primary.stream``: the
    # runtime is CupyDevice, a class of another module).
    ("towerflow/backends/cupy_graphs.py", "stream"): "cupy.cuda.Stream",
    # GraphReplayer.total_bytes: the pool a graph's memory comes from
    # (unpacked from a tuple).
    ("towerflow/backends/cupy_graphs.py", "backing"): "cupy.cuda.MemoryPool",
    # make_member_kernel's reduce(x): the tower's value on its GPU.
    ("towerflow/parallel/nccl.py", "x"): "cupy.ndarray",
}
# The names the brief of this check lists as the ones that matter.
RELIED_ON = [
    "cupy.cuda.Stream", "cupy.cuda.Stream.record", "cupy.cuda.Stream.wait_event",
    "cupy.cuda.Stream.synchronize", "cupy.cuda.Stream.begin_capture",
    "cupy.cuda.Stream.end_capture", "cupy.cuda.Stream.launch_host_func",
    "cupy.cuda.Stream.ptr", "cupy.cuda.Event.synchronize", "cupy.cuda.Graph.launch",
    "cupy.cuda.MemoryPool", "cupy.cuda.MemoryPool.malloc", "cupy.cuda.MemoryPool.set_limit",
    "cupy.cuda.MemoryPool.used_bytes", "cupy.cuda.MemoryPool.total_bytes", "cupy.cuda.Device",
    "cupy.cuda.Device.__enter__", "cupy.cuda.Device.__exit__", "cupy.ndarray.set",
    "cupy.ndarray.data", "cupy.cuda.MemoryPointer.ptr",
    "cupy.cuda.nccl.NcclCommunicator.initAll", "cupy.cuda.nccl.NcclCommunicator.allReduce",
    "cupy.cuda.nccl.groupStart", "cupy.cuda.nccl.groupEnd", "cupy.ElementwiseKernel",
    "cupy.ElementwiseKernel.__call__", "cupy.cuda.using_allocator", "cupyx.empty_pinned",
    "cupy.asnumpy", "cupy.cuda.runtime.getDeviceCount",
]

WALK = walk_modules(GPU_CODE, ROOT, HINTS)
USES_BY_NAME = {}
for _use in WALK.uses:
    USES_BY_NAME.setdefault(_use.name, []).append(_use)


@pytest.fixture(scope="module")
def missing():
    """The used names the installed CuPy lacks (asked in a fresh Python)."""
    return cupy_api.missing_in_fresh_process([(use.name, use.imported) for use in WALK.uses])


@pytest.mark.parametrize("name", sorted(USES_BY_NAME))
def test_cupy_has_the_name_and_takes_the_calls(name, missing):
    uses = USES_BY_NAME[name]
    problems = [f"{use.where}: {name} is not there after `import {use.imported}`: "
                f"{missing[key]}" for use in uses
                if (key := f"{name} | {use.imported}") in missing]
    problems = problems or cupy_api.check_calls(name, uses)
    assert not problems, "\n".join(problems)


def test_the_walk_finds_every_gpu_module_and_the_names_that_matter():
    print(f"{len(USES_BY_NAME)} CuPy names checked, in {len(WALK.uses)} uses:")
    print("\n".join(sorted(USES_BY_NAME)))
    walked = {use.where.split(":")[0] for use in WALK.uses}
    importing = {str(path.relative_to(ROOT)) for path in GPU_CODE
                 if re.search(r"^\s*(import|from) cupy", path.read_text(), re.MULTILINE)}
    assert sorted((set(GPU_MODULES) | importing) - walked) == []
    assert sorted(set(RELIED_ON) - set(USES_BY_NAME)) == []


def test_every_hint_still_names_a_variable():
    assert sorted(set(HINTS) - WALK.used_hints) == [], "a hint no longer matches: drop it"


# -- the check itself ----------------------------------------------------------------------

MUTATED = """
import cupy


def capture(run):
    stream = cupy.cuda.Stream(non_blocking=True, nonblocking=True)
    stream.begin_capturing()
    run()
    return stream.end_capture().launch(stream)
"""


def test_the_check_catches_a_renamed_method_and_an_unknown_keyword(tmp_path):
    (tmp_path / "gpu_code.py").write_text(MUTATED)
    uses = checked_cupy_names([tmp_path / "gpu_code.py"], tmp_path)
    missing = cupy_api.missing_names([(use.name, use.imported) for use in uses])
    assert list(missing) == ["cupy.cuda.Stream.begin_capturing | cupy"]
    stream_calls = [use for use in uses if use.name == "cupy.cuda.Stream"]
    problems = cupy_api.check_calls("cupy.cuda.Stream", stream_calls)
    assert len(problems) == 1 and "nonblocking" in problems[0] and \
        "gpu_code.py:6" in problems[0]
    launched = [use for use in uses if use.name == "cupy.cuda.Graph.launch"]
    assert cupy_api.check_calls("cupy.cuda.Graph.launch", launched) == []


def test_cython_signatures_are_read_from_their_docstrings():
    from cupy.cuda import nccl
    signature = cupy_api.doc_signature(nccl.NcclCommunicator.allReduce)
    assert list(signature.parameters) == ["self", "sendbuf", "recvbuf", "count", "datatype",
                                          "op", "stream"]
    assert str(cupy_api.doc_signature(cupy.cuda.MemoryPool.set_limit)) == \
        "(self, size=None, fraction=None)"


# -- behaviour towerflow relies on ------------------------------------------------------


def host_backed_cupy_array(host):
    """A real cupy.ndarray made without a GPU, over ``host``'s memory: enough
    for what CuPy does before it touches a device."""
    memory = cupy.cuda.UnownedMemory(host.ctypes.data, host.nbytes, host, device_id=0)
    return cupy.ndarray(host.shape, host.dtype, memptr=cupy.cuda.MemoryPointer(memory, 0))


class _HostCopyingRuntime:
    """A GPU runtime's to_host, as a CPU runtime's copy_from must use it."""

    def __init__(self, host):
        self.host = host

    def to_host(self, value):
        return self.host.copy()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")   # NumPy 2's copy= probe
def test_numpy_refuses_a_cupy_array_implicitly():
    # cupy/_core/core.pyx, _ndarray_base.__array__: raises instead of copying.
    value = host_backed_cupy_array(np.arange(6, dtype=np.float32).reshape(2, 3))
    for convert in (np.array, np.asarray, np.ascontiguousarray):
        with pytest.raises(TypeError, match="Implicit conversion to a NumPy array"):
            convert(value)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_cpu_runtime_copies_a_gpu_value_through_the_gpu_runtime():
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    copied = numpy_backend.NumpyDevice.copy_from(host_backed_cupy_array(host),
                                                 _HostCopyingRuntime(host))
    assert type(copied) is np.ndarray and np.array_equal(copied, host)


def test_no_known_cupy_array_is_converted_by_numpy(tmp_path):
    assert WALK.conversions == []
    (tmp_path / "gpu_code.py").write_text(
        "import cupy\nimport numpy as np\n\n\ndef host(shape):\n"
        "    return np.asarray(cupy.zeros(shape))\n")
    assert walk_modules([tmp_path / "gpu_code.py"], tmp_path).conversions == \
        ["gpu_code.py:6"]


def test_to_host_gets_a_finished_copy():
    # asnumpy waits for the copy unless told blocking=False (cupy/__init__.py).
    blocking = inspect.signature(cupy.asnumpy).parameters["blocking"]
    assert blocking.kind is inspect.Parameter.KEYWORD_ONLY and blocking.default is True
    calls = USES_BY_NAME["cupy.asnumpy"]
    assert [use.where for use in calls if "blocking" in use.call.keywords] == []


def test_capture_runs_on_a_non_blocking_stream_in_relaxed_mode():
    # cupy/cuda/stream.pyx: the legacy stream cannot capture; begin_capture's
    # mode=None means streamCaptureModeRelaxed, which lets a pool cudaMalloc
    # while capturing (a graph's pool grows during its capture).
    with pytest.raises(RuntimeError, match="legacy"):
        cupy.cuda.Stream.null.begin_capture()
    assert inspect.signature(cupy.cuda.Stream).parameters["non_blocking"].default is False
    assert all("non_blocking" in use.call.keywords for use in USES_BY_NAME["cupy.cuda.Stream"])
    mode = inspect.signature(cupy.cuda.Stream.begin_capture).parameters["mode"]
    assert mode.default is None
    assert "Default is\n        :data:`~cupy.cuda.runtime.streamCaptureModeRelaxed`" in \
        cupy.cuda.Stream.begin_capture.__doc__
    begin = USES_BY_NAME["cupy.cuda.Stream.begin_capture"]
    assert [use.where for use in begin if use.call.positional or use.call.keywords] == []


def test_pool_limits_are_sizes_and_a_logical_gpu_never_has_a_zero_limit(fake_gpus):
    import towerflow as tf
    from towerflow.device import runtime
    # MemoryPool.set_limit: "If both of them are not specified or 0 is specified,
    # the limit will be disabled" -- a logical GPU's limit must never be 0.
    doc = " ".join(cupy.cuda.MemoryPool.set_limit.__doc__.split())
    assert "or ``0`` is specified, the limit will be disabled" in doc
    assert all(use.call.keywords == ("size",)
               for use in USES_BY_NAME["cupy.cuda.MemoryPool.set_limit"])
    fake_gpus(2)
    first, _ = tf.config.list_physical_devices("GPU")
    tf.config.set_logical_device_configuration(
        first, [tf.config.LogicalDeviceConfiguration(memory_limit=1)] * 2)
    gpus = [device for device in runtime.logical_devices() if device.gpu is not None]
    assert len(gpus) == 3 and min(device.memory_limit for device in gpus) == 2**20


@pytest.fixture
def cupy_backend():
    """towerflow's CuPy backend on the real CuPy (registrations undone after,
    unless another test had loaded it)."""
    loaded = "towerflow.backends.cupy_backend" in sys.modules
    from towerflow.backends import cupy_backend as module
    assert module.cupy is cupy, "the CuPy backend was built on the simulated CuPy"
    yield module
    if not loaded:
        registry.unregister_kernels("GPU")
        backends.unregister_backend("GPU")


def update_calls(arrays):
    """FusedUpdates' method, its kernel's attribute, a call, and the value each
    kernel parameter must receive from that call."""
    var, slot1, slot2, grad = arrays
    lr, momentum, alpha, beta1, beta2, epsilon = 0.1, 0.9, 0.01, 0.9, 0.999, 1e-7
    return {
        "momentum": ("_momentum", (var, slot1, grad, lr, momentum, True),
                     {"grad": grad, "lr": lr, "momentum": momentum, "nesterov": True,
                      "var": var, "accum": slot1}),
        "adam": ("_adam", (var, slot1, slot2, grad, alpha, beta1, beta2, epsilon),
                 {"grad": grad, "alpha": alpha, "beta1": beta1, "beta2": beta2,
                  "epsilon": epsilon, "var": var, "m": slot1, "v": slot2}),
    }


@pytest.mark.parametrize("update", ["momentum", "adam"])
def test_fused_updates_give_cupys_kernels_their_arguments_in_order(cupy_backend, update):
    arrays = [host_backed_cupy_array(np.full(4, i, np.float32)) for i in range(4)]
    attribute, call, by_param = update_calls(arrays)[update]
    fused = cupy_backend.FusedUpdates()
    kernel = getattr(fused, attribute)          # the real cupy.ElementwiseKernel
    received = []
    setattr(fused, attribute, lambda *args: received.extend(args))
    assert getattr(fused, update)(*call)
    params = [param.name for param in kernel.in_params + kernel.out_params]
    assert len(received) == kernel.nargs
    assert all(got is by_param[name] for got, name in zip(received, params)), params
    # CuPy checks the count before it needs a device: with the right count it
    # gets as far as asking for one (no GPU here), with one less it refuses.
    with pytest.raises(TypeError, match="Wrong number of arguments"):
        kernel(*received[:-1])
    with pytest.raises(Exception) as raised:
        kernel(*received)
    assert "Wrong number of arguments" not in str(raised.value)


def test_nccl_codes_are_cupys():
    from cupy.cuda import nccl

    from towerflow.parallel import nccl as towerflow_nccl
    assert towerflow_nccl.NCCL_SUM == nccl.NCCL_SUM
    for dtype_name, code in towerflow_nccl.NCCL_DTYPES.items():
        assert code == getattr(nccl, f"NCCL_{dtype_name.upper()}"), dtype_name


def test_the_devices_report_names_the_nccl_version():
    from cupy.cuda import nccl
    expected = nccl.get_version() if nccl.available else None
    code = ("import json; from towerflow.cli_train import devices_report; "
            "print(json.dumps(devices_report()['versions']))")
    env = {key: value for key, value in os.environ.items()
           if key != "TOWERFLOW_SIMULATED_GPUS"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, check=True)
    versions = json.loads(done.stdout.strip().splitlines()[-1])
    assert versions["nccl"] == expected and versions["cupy"] == cupy.__version__


# -- the simulated CuPy (towerflow/simgpu) -----------------------------------------------


# Mismatches found in the simulator, to be fixed there (strict: a fixed one
# turns red here; then drop its line).
KNOWN_SIMULATOR_MISMATCHES = {}
# {CuPy module name: simulated module}: what towerflow/simgpu puts in sys.modules
SIMULATED = simgpu_modules.build()


def simulated_cases():
    return [pytest.param(offered, id=offered.name, marks=[pytest.mark.xfail(
                strict=True, reason=KNOWN_SIMULATOR_MISMATCHES[offered.name])]
                if offered.name in KNOWN_SIMULATOR_MISMATCHES else [])
            for offered in cupy_api.simulated_names(SIMULATED)]


@pytest.fixture(scope="module")
def missing_simulated():
    offered = cupy_api.simulated_names(SIMULATED)
    return cupy_api.missing_in_fresh_process([(item.name, item.module) for item in offered])


@pytest.mark.parametrize("offered", simulated_cases())
def test_the_simulator_offers_cupys_names_with_cupys_signatures(offered, missing_simulated):
    key = f"{offered.name} | {offered.module}"
    if key in missing_simulated:
        problems = [(f"{offered.name} is not in the installed CuPy after `import "
                     f"{offered.module}`: {missing_simulated[key]}")]
    else:
        problems = cupy_api.check_simulated(offered)
    assert not problems, "\n".join(problems)

