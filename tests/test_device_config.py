"""tf.config, device_lib, tf.test and the GPU probe (seed program P7)."""

import math
import sys
import types

import pytest

from towerflow import config, device_lib, testing
from towerflow.device import GpuInfo, PhysicalDevice, physical, runtime, set_gpu_probe

MB = 2**20
H100 = GpuInfo(index=0, name="NVIDIA H100 80GB HBM3", total_memory=80 * 1024 * MB,
               compute_capability=(9, 0), pci_bus_id="0000:00:1e.0")
A100 = GpuInfo(index=1, name="NVIDIA A100-SXM4-40GB", total_memory=40 * 1024 * MB,
               compute_capability=(8, 0), pci_bus_id="0000:00:1f.0")
CPU = PhysicalDevice("/physical_device:CPU:0", "CPU")
H100_LINE = ("-> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:00:1e.0, "
             "compute capability: 9.0")
LDC = config.LogicalDeviceConfiguration


@pytest.fixture(autouse=True)
def clean_runtime():
    runtime.reset()
    set_gpu_probe(None)
    yield
    runtime.reset()
    set_gpu_probe(None)


@pytest.fixture
def no_gpu():
    set_gpu_probe(lambda: ([], "no GPU in this test"))


@pytest.fixture
def two_gpus():
    set_gpu_probe(lambda: ([H100, A100], None))


# --- P7 on a machine without GPUs -----------------------------------------

def test_without_gpu_nothing_reports_a_gpu(no_gpu):
    assert testing.gpu_device_name() == ""
    assert testing.is_gpu_available() is False
    assert config.list_physical_devices("GPU") == []
    assert config.list_physical_devices() == [CPU]
    assert config.list_logical_devices("gpu") == []
    assert runtime.device_mapping_lines() == ["Device mapping: no known devices."]
    assert runtime.gpu_unavailable_reason() == "no GPU in this test"


def test_cpu_split_into_four_logical_cpus(no_gpu):
    cpu, = config.list_physical_devices("CPU")
    assert testing.gpu_device_name() == ""  # asking first must not freeze anything
    assert len(device_lib.list_local_devices()) == 1
    config.set_logical_device_configuration(cpu, [LDC()] * 4)
    assert config.get_logical_device_configuration(cpu) == [LDC()] * 4
    names = [f"/device:CPU:{index}" for index in range(4)]
    assert config.list_logical_devices("CPU") == [
        config.LogicalDevice(name, "CPU") for name in names]
    assert [device.name for device in device_lib.list_local_devices()] == names
    assert [device.name for device in runtime.logical_devices()] == [
        f"/job:localhost/replica:0/task:0/device:CPU:{index}" for index in range(4)]


def test_logical_device_record_fields(no_gpu):
    device, = runtime.logical_devices()
    assert device.spec.to_string() == device.name
    assert (device.device_type, device.index, device.gpu) == ("CPU", 0, None)
    assert device.memory_limit == physical.host_memory_bytes() > 0
    assert device.short_name == "/device:CPU:0"


def test_configuration_after_initialisation_raises_runtime_error(two_gpus):
    cpu, = config.list_physical_devices("CPU")
    gpus = config.list_physical_devices("GPU")
    config.list_logical_devices()
    calls = [
        lambda: config.set_logical_device_configuration(cpu, [LDC()] * 2),
        lambda: config.set_visible_devices(gpus[1], "GPU"),
        lambda: config.experimental.set_memory_growth(gpus[0], True),
        lambda: runtime.set_local_task("worker", 0, 1),
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match="already initialised") as info:
            call()
        assert "before the first Session" in str(info.value)
    # Repeating the configuration in force is a no-op, as in TensorFlow.
    config.set_visible_devices(gpus, "GPU")
    config.experimental.set_memory_growth(gpus[0], False)


def test_device_lib_and_tf_test_do_not_freeze(two_gpus):
    gpus = config.list_physical_devices("GPU")
    assert testing.gpu_device_name() == "/device:GPU:0"
    device_lib.list_local_devices()
    runtime.device_mapping_lines()
    config.set_visible_devices(gpus[1], "GPU")
    assert testing.gpu_device_name() == "/device:GPU:0"
    assert not runtime.is_initialized()


# --- LogicalDeviceConfiguration checks ------------------------------------

def test_memory_limit_below_one_suggests_memory_fraction():
    with pytest.raises(ValueError) as info:
        config.experimental.VirtualDeviceConfiguration(memory_limit=0.3)
    message = str(info.value)
    assert "megabytes" in message and "memory_fraction=0.3" in message


@pytest.mark.parametrize("kwargs, expected", [
    ({"memory_limit": -5}, "-5"),
    ({"memory_limit": 0}, "memory_limit"),
    ({"memory_limit": "1024"}, "'1024'"),
    ({"memory_limit": True}, "True"),
    ({"memory_limit": math.nan}, "nan"),
    ({"memory_fraction": 0}, "(0, 1]"),
    ({"memory_fraction": 1.5}, "1.5"),
    ({"memory_fraction": "half"}, "'half'"),
    ({"memory_limit": 1024, "memory_fraction": 0.5}, "not both"),
    ({"experimental_priority": 0.5}, "0.5"),
])
def test_bad_configuration_values_raise_value_error(kwargs, expected):
    with pytest.raises(ValueError) as info:
        LDC(**kwargs)
    assert expected in str(info.value)


def test_virtual_device_configuration_is_the_same_class():
    assert config.experimental.VirtualDeviceConfiguration is LDC
    assert LDC(memory_limit=1024) == LDC(memory_limit=1024)


# --- P7 with fake GPUs ------------------------------------------------------

def test_p7_one_gpu_split_into_four(two_gpus):
    assert testing.gpu_device_name() == "/device:GPU:0"
    gpus = config.list_physical_devices("GPU")
    assert gpus == [PhysicalDevice("/physical_device:GPU:0", "GPU"),
                    PhysicalDevice("/physical_device:GPU:1", "GPU")]
    config.set_visible_devices(gpus[0], "GPU")
    config.experimental.set_virtual_device_configuration(
        gpus[0], [config.experimental.VirtualDeviceConfiguration(memory_limit=1024)] * 4)
    assert config.get_visible_devices("GPU") == [gpus[0]]
    assert config.get_visible_devices() == [CPU, gpus[0]]
    assert config.experimental.list_logical_devices("GPU") == [
        config.LogicalDevice(f"/device:GPU:{index}", "GPU") for index in range(4)]
    logical_gpus = [d for d in runtime.logical_devices() if d.device_type == "GPU"]
    assert [d.index for d in logical_gpus] == [0, 1, 2, 3]
    assert all(d.gpu == H100 and d.memory_limit == 1024 * MB for d in logical_gpus)
    assert runtime.device_mapping_lines() == ["Device mapping:"] + [
        f"/job:localhost/replica:0/task:0/device:GPU:{index} {H100_LINE}"
        for index in range(4)]
    assert testing.gpu_device_name() == "/device:GPU:0"
    assert testing.is_gpu_available() is True


def test_device_lib_lists_logical_gpus_with_descriptions(two_gpus):
    gpus = config.list_physical_devices("GPU")
    config.set_logical_device_configuration(gpus[1], [LDC(memory_limit=2048)] * 2)
    devices = device_lib.list_local_devices()
    assert [(d.name, d.device_type) for d in devices] == [
        ("/device:CPU:0", "CPU"), ("/device:GPU:0", "GPU"),
        ("/device:GPU:1", "GPU"), ("/device:GPU:2", "GPU")]
    assert [d.memory_limit for d in devices[1:]] == [80 * 1024 * MB, 2048 * MB, 2048 * MB]
    assert devices[0].physical_device_desc == ""
    assert devices[1].physical_device_desc == H100_LINE[3:]
    assert devices[2].physical_device_desc == (
        "device: 1, name: NVIDIA A100-SXM4-40GB, pci bus id: 0000:00:1f.0, "
        "compute capability: 8.0")
    assert len({d.incarnation for d in devices}) == 4
    assert device_lib.list_local_devices()[2].incarnation == devices[2].incarnation
    assert 'name: "/device:GPU:1"' in repr(devices[2])
    assert "memory_limit: 2147483648" in repr(devices[2])


def test_logical_gpu_numbering_continues_across_physical_gpus(two_gpus):
    gpus = config.list_physical_devices("gpu")
    config.set_logical_device_configuration(gpus[0], [LDC(memory_limit=1000)] * 2)
    lines = runtime.device_mapping_lines()
    assert [line.split(" -> ")[1][:9] for line in lines[1:]] == ["device: 0"] * 2 + [
        "device: 1"]
    assert lines[3].startswith("/job:localhost/replica:0/task:0/device:GPU:2 -> ")
    gpu_devices = [d for d in runtime.logical_devices() if d.device_type == "GPU"]
    assert [d.gpu.index for d in gpu_devices] == [0, 0, 1]
    assert gpu_devices[2].memory_limit == A100.total_memory


def test_memory_fraction_is_converted_to_megabytes(two_gpus):
    gpu = config.list_physical_devices("GPU")[0]
    config.set_logical_device_configuration(
        gpu, [LDC(memory_fraction=0.25, experimental_priority=1)] * 2)
    assert config.get_logical_device_configuration(gpu) == [
        LDC(memory_limit=20480, experimental_priority=1)] * 2
    assert runtime.logical_devices()[1].memory_limit == 20480 * MB


@pytest.mark.parametrize("configs, asked", [
    ([LDC(memory_limit=30000)] * 3, "90000 MB"),
    ([LDC(memory_fraction=0.5), LDC(memory_fraction=0.6)], "90112 MB"),
])
def test_over_subscription_names_both_numbers(two_gpus, configs, asked):
    gpu = config.list_physical_devices("GPU")[0]
    with pytest.raises(ValueError) as info:
        config.set_logical_device_configuration(gpu, configs)
    assert asked in str(info.value) and "81920 MB" in str(info.value)
    assert config.get_logical_device_configuration(gpu) is None


def test_several_logical_gpus_need_limits(two_gpus):
    gpu = config.list_physical_devices("GPU")[0]
    with pytest.raises(ValueError, match="memory_limit"):
        config.set_logical_device_configuration(gpu, [LDC()] * 2)
    config.set_logical_device_configuration(gpu, [LDC()])
    assert runtime.logical_devices()[1].memory_limit == H100.total_memory


@pytest.mark.parametrize("configs", [[], LDC(), "1024", [LDC(), 1024]])
def test_configuration_list_is_checked(two_gpus, configs):
    with pytest.raises(ValueError, match="LogicalDeviceConfiguration"):
        config.set_logical_device_configuration(CPU, configs)


def test_none_clears_a_split(no_gpu):
    config.set_logical_device_configuration(CPU, [LDC()] * 3)
    config.set_logical_device_configuration(CPU, None)
    assert config.get_logical_device_configuration(CPU) is None
    assert len(config.list_logical_devices()) == 1


def test_memory_growth(two_gpus):
    gpus = config.list_physical_devices("GPU")
    assert config.experimental.get_memory_growth(gpus[0]) is False
    config.experimental.set_memory_growth(gpus[0], True)
    assert config.experimental.get_memory_growth(gpus[0]) is True
    with pytest.raises(ValueError, match="memory growth"):
        config.set_logical_device_configuration(gpus[0], [LDC(memory_limit=1024)])
    config.set_logical_device_configuration(gpus[1], [LDC(memory_limit=1024)])
    with pytest.raises(ValueError, match="split into logical devices"):
        config.experimental.set_memory_growth(gpus[1], True)
    with pytest.raises(ValueError, match="GPUs only"):
        config.experimental.set_memory_growth(CPU, True)


def test_hiding_every_gpu(two_gpus):
    config.set_visible_devices([], "GPU")
    assert testing.gpu_device_name() == ""
    assert config.get_visible_devices() == [CPU]
    assert "set_visible_devices" in runtime.gpu_unavailable_reason()
    assert runtime.device_mapping_lines() == ["Device mapping: no known devices."]
    assert len(config.list_physical_devices("GPU")) == 2  # hidden, still physical


def test_visible_devices_of_every_type(two_gpus):
    gpus = config.list_physical_devices("GPU")
    config.set_visible_devices([CPU, gpus[1]])
    assert config.get_visible_devices() == [CPU, gpus[1]]
    device = runtime.logical_devices()[1]
    assert (device.short_name, device.gpu) == ("/device:GPU:0", A100)


def test_the_cpu_cannot_be_hidden(two_gpus):
    gpus = config.list_physical_devices("GPU")
    with pytest.raises(ValueError, match="CPU cannot be hidden"):
        config.set_visible_devices(gpus)
    with pytest.raises(ValueError, match="CPU cannot be hidden"):
        config.set_visible_devices([], "CPU")
    with pytest.raises(ValueError, match="not a GPU device"):
        config.set_visible_devices(CPU, "GPU")


@pytest.mark.parametrize("bad", [
    ("/physical_device:CPU:0", "CPU"), "/cpu:0", config.LogicalDevice("/device:CPU:0", "CPU"),
    PhysicalDevice("/physical_device:GPU:5", "GPU"),
])
def test_foreign_devices_are_rejected_by_name(two_gpus, bad):
    for call in (config.get_logical_device_configuration,
                 lambda device: config.set_visible_devices([device], "GPU"),
                 config.experimental.get_memory_growth):
        with pytest.raises(ValueError, match="not a physical device") as info:
            call(bad)
        assert repr(bad) in str(info.value)


@pytest.mark.parametrize("call", [
    config.list_physical_devices, config.list_logical_devices, config.get_visible_devices])
def test_device_type_is_case_insensitive_and_checked(no_gpu, call):
    assert call("cpu") == call("CPU") and len(call("Cpu")) == 1
    with pytest.raises(ValueError) as info:
        call("TPU")
    assert "'TPU'" in str(info.value)
    assert "'CPU'" in str(info.value) and "'GPU'" in str(info.value)


def test_is_gpu_available_by_compute_capability(two_gpus):
    assert testing.is_gpu_available(cuda_only=True, min_cuda_compute_capability=(9, 0))
    assert not testing.is_gpu_available(min_cuda_compute_capability=(10, 0))
    config.set_visible_devices(config.list_physical_devices("GPU")[1], "GPU")
    assert not testing.is_gpu_available(min_cuda_compute_capability=(9, 0))
    with pytest.raises(ValueError, match="'9.0'"):
        testing.is_gpu_available(min_cuda_compute_capability="9.0")


def test_local_task_names_the_devices(no_gpu):
    assert runtime.local_task() == ("localhost", 0, 0)
    runtime.set_local_task("worker", 0, 1)
    assert runtime.logical_devices()[0].name == "/job:worker/replica:0/task:1/device:CPU:0"
    with pytest.raises(ValueError, match="-1"):
        runtime.set_local_task("worker", 0, -1)
    runtime.reset()
    assert runtime.local_task() == ("localhost", 0, 0)


def test_probe_is_cached_until_reset():
    calls = []
    set_gpu_probe(lambda: calls.append(1) or ([H100], None))
    config.list_physical_devices()
    testing.gpu_device_name()
    assert len(calls) == 1
    runtime.reset()
    config.list_physical_devices()
    assert len(calls) == 2


# --- the real probe ---------------------------------------------------------

def test_real_probe_without_gpu_gives_a_reason():
    gpus, reason = physical.probe_gpus()
    if gpus:
        pytest.skip("this machine has a usable GPU")
    assert gpus == [] and reason
    assert runtime.gpu_unavailable_reason() == reason
    assert testing.gpu_device_name() == ""


@pytest.mark.parametrize("value", ["-1", "", "-1,0", "none"])
def test_cuda_visible_devices_hiding_everything(monkeypatch, value):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    physical.clear_probe_cache()
    gpus, reason = physical.probe_gpus()
    assert gpus == []
    assert f"CUDA_VISIBLE_DEVICES={value!r}" in reason


def test_is_built_with_cuda_follows_cupy_import(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # None makes the import fail
    assert testing.is_built_with_cuda() is False
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    assert testing.is_built_with_cuda() is True


class FakeCudaError(RuntimeError):
    def __init__(self, status):
        super().__init__(f"cudaError {status}")
        self.status = status


class FakeRuntime:
    """Only the calls the probe may make: none of them creates a context."""

    def __init__(self, driver=12040, count=2, count_error=None):
        self.driver, self.count, self.count_error = driver, count, count_error

    def driverGetVersion(self):
        return self.driver

    def runtimeGetVersion(self):
        return 12080

    def getDeviceCount(self):
        if self.count_error:
            raise FakeCudaError(self.count_error)
        return self.count

    def getDeviceProperties(self, index):
        return {"name": b"NVIDIA H100 80GB HBM3", "totalGlobalMem": 85 * 10**9 + index,
                "major": 9, "minor": 0}

    def deviceGetPCIBusId(self, index):
        return f"0000:00:1{'EF'[index]}.0"


def fake_cupy(monkeypatch, **kwargs):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(physical, "_env_at_cuda_init", None)  # the fake never ran CUDA
    module = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=FakeRuntime(**kwargs)))
    monkeypatch.setitem(sys.modules, "cupy", module)
    physical.clear_probe_cache()


def test_cupy_probe_reads_properties(monkeypatch):
    fake_cupy(monkeypatch)
    gpus, reason = physical.probe_gpus()
    assert reason is None
    assert gpus[1] == GpuInfo(1, "NVIDIA H100 80GB HBM3", 85 * 10**9 + 1, (9, 0),
                              "0000:00:1f.0")


@pytest.mark.parametrize("kwargs, expected", [
    ({"driver": 0}, "no CUDA driver was found"),
    ({"count_error": 35}, "driver supports CUDA 12.4, CuPy uses CUDA 12.8"),
    ({"count_error": 100}, "found no GPU"),
    ({"count": 0}, "found no GPU"),
    ({"count_error": 999}, "cudaError 999"),
])
def test_cupy_probe_failures_become_reasons(monkeypatch, kwargs, expected):
    fake_cupy(monkeypatch, **kwargs)
    gpus, reason = physical.probe_gpus()
    assert gpus == [] and expected in reason


def test_cuda_visible_devices_with_unknown_ids_is_named(monkeypatch):
    fake_cupy(monkeypatch, count_error=100)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    assert "CUDA_VISIBLE_DEVICES='7'" in physical.probe_gpus()[1]


def test_missing_cupy_says_how_to_install(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setitem(sys.modules, "cupy", None)
    physical.clear_probe_cache()
    assert physical.probe_gpus() == (
        [], "CuPy is not installed; install it with `pip install towerflow[cuda12]`")


def test_broken_cupy_is_a_reason_not_a_traceback(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    real_import = __import__

    def failing_import(name, *args, **kwargs):
        if name == "cupy":
            raise ImportError("libcudart.so.12: cannot open", name="cupy_backends")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr("builtins.__import__", failing_import)
    physical.clear_probe_cache()
    reason = physical.probe_gpus()[1]
    assert "CuPy failed to import" in reason and "libcudart.so.12" in reason
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace())  # no cupy.cuda
    monkeypatch.setattr("builtins.__import__", real_import)
    physical.clear_probe_cache()
    assert "AttributeError" in physical.probe_gpus()[1]
