"""DeviceSpec: parsing every form users write, printing, merging scopes."""

import pytest

from towerflow.device import DeviceSpec, canonical, merge_device_scopes, set_gpu_probe
from towerflow.device import runtime


@pytest.fixture(autouse=True)
def clean_runtime():
    runtime.reset()
    set_gpu_probe(None)
    yield
    runtime.reset()
    set_gpu_probe(None)


def fields(spec):
    return (spec.job, spec.replica, spec.task, spec.device_type, spec.device_index)


@pytest.mark.parametrize("text, expected", [
    ("/cpu:0", (None, None, None, "CPU", 0)),
    ("/gpu:1", (None, None, None, "GPU", 1)),
    ("gpu:1", (None, None, None, "GPU", 1)),
    ("/GPU:1", (None, None, None, "GPU", 1)),
    ("/device:GPU:1", (None, None, None, "GPU", 1)),
    ("/device:gpu:1", (None, None, None, "GPU", 1)),
    ("device:CPU:0", (None, None, None, "CPU", 0)),
    ("/job:localhost/replica:0/task:0/device:GPU:1", ("localhost", 0, 0, "GPU", 1)),
    ("/job:worker/task:1/cpu:0", ("worker", None, 1, "CPU", 0)),
    ("/job:localhost", ("localhost", None, None, None, None)),
    ("/device:GPU", (None, None, None, "GPU", None)),
    ("/gpu:*", (None, None, None, "GPU", None)),
    ("/device:GPU:*", (None, None, None, "GPU", None)),
    ("/gpu", (None, None, None, "GPU", None)),
    ("/replica:2", (None, 2, None, None, None)),
    ("/job:ps/replica:1/task:3", ("ps", 1, 3, None, None)),
    ("/device:TPU:2", (None, None, None, "TPU", 2)),
    ("/gpu:12", (None, None, None, "GPU", 12)),
    ("", (None, None, None, None, None)),
    ("/", (None, None, None, None, None)),
])
def test_from_string_parses_every_form(text, expected):
    assert fields(DeviceSpec.from_string(text)) == expected


@pytest.mark.parametrize("text, printed", [
    ("/cpu:0", "/device:CPU:0"),
    ("gpu:1", "/device:GPU:1"),
    ("/device:gpu:1", "/device:GPU:1"),
    ("/job:localhost/replica:0/task:0/device:GPU:1",
     "/job:localhost/replica:0/task:0/device:GPU:1"),
    ("/job:worker/task:1/cpu:0", "/job:worker/task:1/device:CPU:0"),
    ("/job:localhost", "/job:localhost"),
    ("/device:GPU", "/device:GPU:*"),
    ("/gpu:*", "/device:GPU:*"),
    ("", ""),
])
def test_to_string_prints_set_fields_in_tf_order(text, printed):
    spec = DeviceSpec.from_string(text)
    assert spec.to_string() == printed
    assert str(spec) == printed
    assert DeviceSpec.from_string(printed) == spec


def test_constructor_normalises_type_and_prints():
    assert DeviceSpec(device_type="GPU", device_index=2).to_string() == "/device:GPU:2"
    assert DeviceSpec(device_type="gpu", device_index=2) == DeviceSpec.from_string("/gpu:2")
    full = DeviceSpec("localhost", 0, 0, "cpu", 0)
    assert str(full) == "/job:localhost/replica:0/task:0/device:CPU:0"
    assert DeviceSpec(device_index=1).to_string() == "/device:*:1"


def test_spec_is_immutable_hashable_and_compared_by_fields():
    spec = DeviceSpec.from_string("/gpu:1")
    with pytest.raises(AttributeError):
        spec.device_index = 2
    assert spec == DeviceSpec(device_type="GPU", device_index=1)
    assert spec != DeviceSpec(device_type="GPU", device_index=2)
    assert len({spec, DeviceSpec.from_string("/device:GPU:1"), DeviceSpec()}) == 2
    assert {spec: "tower"}[DeviceSpec.from_string("gpu:1")] == "tower"


def test_repr_shows_set_fields():
    spec = DeviceSpec.from_string("/job:worker/task:1/cpu:0")
    assert repr(spec) == "DeviceSpec(job='worker', task=1, device_type='CPU', device_index=0)"
    assert repr(DeviceSpec()) == "DeviceSpec()"


@pytest.mark.parametrize("text", [
    "/gpu:x", "/gpu:-1", "/gpu:1.0", "/tpu:0", "/job:", "/job:1abc", "/task:a",
    "/replica:-1", "/device:GPU:1:2", "/device:", "/cpu:0/gpu:1", "/foo:0",
    "/job:a/job:b", "gpu 0", "/gpu:0:1",
])
def test_bad_strings_raise_value_error_naming_the_string(text):
    with pytest.raises(ValueError) as info:
        DeviceSpec.from_string(text)
    message = str(info.value)
    assert repr(text) in message
    assert "'/device:GPU:1'" in message and "'/cpu:0'" in message


def test_non_string_is_rejected_with_its_type():
    with pytest.raises(TypeError, match="int 3"):
        DeviceSpec.from_string(3)


@pytest.mark.parametrize("kwargs", [
    {"device_index": -1}, {"task": "1"}, {"replica": 1.5}, {"device_type": "G P U"},
    {"job": 7}, {"device_index": True},
])
def test_constructor_rejects_bad_fields(kwargs):
    (field, value), = kwargs.items()
    with pytest.raises(ValueError, match=field) as info:
        DeviceSpec(**kwargs)
    assert repr(value) in str(info.value)


def test_make_merged_spec_lets_other_win_field_by_field():
    outer = DeviceSpec.from_string("/job:worker/replica:1/task:2/gpu:0")
    merged = outer.make_merged_spec(DeviceSpec.from_string("/cpu:1"))
    assert str(merged) == "/job:worker/replica:1/task:2/device:CPU:1"
    assert outer.make_merged_spec(DeviceSpec()) == outer
    assert str(outer.make_merged_spec("/task:5")) == "/job:worker/replica:1/task:5/device:GPU:0"
    assert str(outer) == "/job:worker/replica:1/task:2/device:GPU:0"  # unchanged


def test_replace_sets_and_unsets_fields():
    spec = DeviceSpec.from_string("/job:worker/gpu:0")
    assert str(spec.replace(device_index=3)) == "/job:worker/device:GPU:3"
    assert str(spec.replace(job=None)) == "/device:GPU:0"
    with pytest.raises(TypeError, match="index"):
        spec.replace(index=1)


def test_matches_checks_only_set_fields():
    full = DeviceSpec.from_string("/job:localhost/replica:0/task:0/device:GPU:3")
    assert DeviceSpec.from_string("/gpu:*").matches(full)
    assert DeviceSpec.from_string("/gpu:3").matches(full)
    assert DeviceSpec().matches(full)
    assert DeviceSpec.from_string("/job:localhost").matches(full)
    assert not DeviceSpec.from_string("/gpu:2").matches(full)
    assert not DeviceSpec.from_string("/cpu:3").matches(full)
    assert not DeviceSpec.from_string("/job:worker/gpu:3").matches(full)
    assert DeviceSpec.from_string("/gpu:3").matches("/job:localhost/device:GPU:3")


def test_nested_scopes_merge_inner_winning_and_none_clearing():
    outer = merge_device_scopes(None, "/job:worker/task:1/gpu:0")
    assert str(outer) == "/job:worker/task:1/device:GPU:0"
    inner = merge_device_scopes(outer, "/device:GPU:1")
    assert str(inner) == "/job:worker/task:1/device:GPU:1"
    innermost = merge_device_scopes(inner, DeviceSpec(device_type="CPU"))
    # A type without index keeps the outer index, field by field, like TF.
    assert str(innermost) == "/job:worker/task:1/device:CPU:1"
    assert merge_device_scopes(inner, None) == DeviceSpec()
    assert str(merge_device_scopes(merge_device_scopes(inner, None), "/cpu:0")) \
        == "/device:CPU:0"
    assert merge_device_scopes(outer, "") == outer


def test_merge_device_scopes_rejects_other_types():
    with pytest.raises(TypeError, match="device string, a DeviceSpec or None"):
        merge_device_scopes(None, 0)
    with pytest.raises(ValueError, match="'/gpu:one'"):
        merge_device_scopes(None, "/gpu:one")


def test_canonical_fills_job_replica_task_and_index():
    assert str(canonical("/gpu:1")) == "/job:localhost/replica:0/task:0/device:GPU:1"
    assert str(canonical(DeviceSpec(device_type="CPU"))) \
        == "/job:localhost/replica:0/task:0/device:CPU:0"
    assert str(canonical("/job:worker/task:3/gpu:2", job="localhost", task=0)) \
        == "/job:worker/replica:0/task:3/device:GPU:2"
    assert str(canonical("/cpu:*", job="worker", replica=1, task=2)) \
        == "/job:worker/replica:1/task:2/device:CPU:0"
