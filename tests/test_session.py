"""Session.run: fetch structures, feeds, errors, default sessions, plan
caching, fetched values as copies, and real copies between logical CPUs."""

import collections

import numpy as np
import pytest

import towerflow as tf
from towerflow import plan as plan_module
from towerflow.backends.numpy_backend import NumpyDevice

Pair = collections.namedtuple("Pair", ["first", "second"])


@pytest.fixture
def graph_ab():
    """a = [1, 2], b = 2 * a."""
    a = tf.constant([1.0, 2.0], name="a")
    b = tf.multiply(a, 2.0, name="b")
    return a, b


def assert_equal(actual, expected):
    np.testing.assert_array_equal(actual, np.asarray(expected, np.float32))


# --- fetch structures ----------------------------------------------------------

def test_fetch_single_tensor(graph_ab):
    a, _ = graph_ab
    with tf.Session() as sess:
        value = sess.run(a)
    assert isinstance(value, np.ndarray)
    assert value.dtype == np.float32
    assert_equal(value, [1, 2])


def test_fetch_scalar_gives_numpy_scalar():
    with tf.Session() as sess:
        value = sess.run(tf.constant(2.5))
    assert value == 2.5
    assert value.dtype == np.float32 and value.shape == ()


def test_fetch_operation_gives_none(graph_ab):
    _, b = graph_ab
    with tf.Session() as sess:
        assert sess.run(b.op) is None
        assert sess.run(tf.no_op()) is None


def test_fetch_variable_gives_its_value():
    weight = tf.Variable([3.0, 4.0], name="weight")
    with tf.Session() as sess:
        sess.run(weight.initializer)
        assert_equal(sess.run(weight), [3, 4])


def test_fetch_by_name(graph_ab):
    with tf.Session() as sess:
        assert_equal(sess.run("a:0"), [1, 2])
        assert_equal(sess.run("b:0"), [2, 4])
        assert sess.run("a") is None  # an op name runs the op


def test_fetch_list_and_tuple(graph_ab):
    a, b = graph_ab
    with tf.Session() as sess:
        as_list = sess.run([a, b])
        as_tuple = sess.run((b, a))
    assert type(as_list) is list and type(as_tuple) is tuple
    assert_equal(as_list[0], [1, 2])
    assert_equal(as_list[1], [2, 4])
    assert_equal(as_tuple[0], [2, 4])


def test_fetch_nested_dict_and_list(graph_ab):
    a, b = graph_ab
    with tf.Session() as sess:
        result = sess.run({"values": [a, {"doubled": b}], "op": b.op, "name": "a:0"})
    assert set(result) == {"values", "op", "name"}
    assert_equal(result["values"][0], [1, 2])
    assert_equal(result["values"][1]["doubled"], [2, 4])
    assert result["op"] is None
    assert_equal(result["name"], [1, 2])


def test_fetch_namedtuple(graph_ab):
    a, b = graph_ab
    with tf.Session() as sess:
        result = sess.run(Pair(first=a, second=[b, a]))
    assert type(result) is Pair
    assert_equal(result.first, [1, 2])
    assert_equal(result.second[0], [2, 4])


def test_structures_with_equal_items_keep_their_own_type(graph_ab):
    a, b = graph_ab
    other = collections.namedtuple("Other", ["x", "y"])
    with tf.Session() as sess:
        assert type(sess.run(Pair(a, b))) is Pair
        # A second structure equal to the first (same items) must not reuse
        # the first one's cached rebuild.
        assert type(sess.run(other(a, b))) is other
        assert type(sess.run((a, b))) is tuple
        assert type(sess.run(collections.OrderedDict(k=a))) is collections.OrderedDict
        assert type(sess.run({"k": a})) is dict


def test_same_tensor_fetched_twice(graph_ab):
    a, _ = graph_ab
    with tf.Session() as sess:
        first, second = sess.run([a, a])
    assert_equal(first, [1, 2])
    assert_equal(second, [1, 2])


# --- feeds ---------------------------------------------------------------------

def test_feed_by_tensor_and_by_name():
    x = tf.placeholder(tf.float32, [None, 2], name="x")
    y = x * 2.0
    with tf.Session() as sess:
        assert_equal(sess.run(y, feed_dict={x: [[1, 2]]}), [[2, 4]])
        assert_equal(sess.run(y, feed_dict={"x:0": [[3, 4], [5, 6]]}), [[6, 8], [10, 12]])


def test_feeding_an_intermediate_tensor_cuts_the_graph_above_it():
    x = tf.placeholder(tf.float32, [2], name="x")
    middle = x * 2.0
    out = middle + 1.0
    with tf.Session() as sess:
        # x is not fed: the ops above `middle` are not run at all.
        assert_equal(sess.run(out, feed_dict={middle: [10, 20]}), [11, 21])


def test_feeding_a_constant_overrides_it(graph_ab):
    a, b = graph_ab
    with tf.Session() as sess:
        assert_equal(sess.run(b, feed_dict={a: [5, 6]}), [10, 12])
        assert_equal(sess.run(b), [2, 4])  # the constant itself is unchanged


def test_int_list_fed_into_float32_is_accepted():
    x = tf.placeholder(tf.float32, [3])
    with tf.Session() as sess:
        value = sess.run(x, feed_dict={x: [1, 2, 3]})
    assert value.dtype == np.float32
    assert_equal(value, [1, 2, 3])


# --- errors --------------------------------------------------------------------

def test_unfed_placeholder_names_it_with_dtype_and_shape():
    x = tf.placeholder(tf.float32, [None, 784], name="images")
    y = x * 2.0
    with tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            sess.run(y)
    message = str(info.value)
    assert "You must feed a value for placeholder tensor 'images'" in message
    assert "dtype float32" in message
    assert "shape [?,784]" in message
    assert info.value.op is x.op


def test_feed_of_the_wrong_shape_names_tensor_and_both_shapes():
    x = tf.placeholder(tf.float32, [None, 2], name="x")
    with tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            sess.run(x, feed_dict={x: np.zeros([2, 3])})
    message = str(info.value)
    assert "'x:0'" in message
    assert "(2, 3)" in message
    assert "(?, 2)" in message


@pytest.mark.parametrize("dtype, value, received", [
    (tf.float32, [["a", "b"]], "<U1"),
    (tf.int32, [[1.5, 2.5]], "float64"),
])
def test_feed_that_cannot_be_cast_is_rejected(dtype, value, received):
    x = tf.placeholder(dtype, [1, 2], name="x")
    with tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            sess.run(x, feed_dict={x: value})
    assert f"dtype {received}" in str(info.value)
    assert f"'x:0' of dtype {dtype.name}" in str(info.value)


def test_unknown_fetch_name():
    tf.constant(1.0, name="a")
    with tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError, match="'missing:0'"):
            sess.run("missing:0")


def test_unknown_feed_key():
    x = tf.placeholder(tf.float32, [], name="x")
    with tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError, match="feed_dict key 'nope:0'"):
            sess.run(x, feed_dict={"nope:0": 1.0})


@pytest.mark.parametrize("bad_fetch", [3, None, [1.5]])
def test_fetch_of_a_bad_type_is_a_type_error(bad_fetch):
    tf.constant(1.0)
    with tf.Session() as sess:
        with pytest.raises(TypeError, match="Fetch argument .* has invalid type"):
            sess.run(bad_fetch)


def test_closed_session_refuses_to_run(graph_ab):
    a, _ = graph_ab
    sess = tf.Session()
    assert_equal(sess.run(a), [1, 2])
    sess.close()
    with pytest.raises(RuntimeError, match="closed Session"):
        sess.run(a)


def test_kernel_failure_names_the_op():
    x = tf.placeholder(tf.float32, name="x")  # unknown shape: only the kernel can tell
    reshaped = tf.reshape(x, [5, 7], name="bad_reshape")
    with tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            sess.run(reshaped, feed_dict={x: np.zeros(6)})
    assert str(info.value) == ("Input to reshape is a tensor with 6 values, but the requested "
                               "shape has 35\n\t [[node bad_reshape (op: Reshape) ]]")
    assert info.value.op is reshaped.op
    assert isinstance(info.value.__cause__, ValueError)  # the kernel's own error is kept


# --- default sessions ----------------------------------------------------------

def test_with_session_makes_eval_and_run_work(graph_ab):
    a, b = graph_ab
    counter = tf.Variable(0.0, name="counter")
    with tf.Session() as sess:
        assert tf.get_default_session() is sess
        counter.initializer.run()
        assert_equal(b.eval(), [2, 4])
        assert_equal(b.eval(feed_dict={a: [1, 1]}), [2, 2])
        assert counter.assign_add(1.0).op.run() is None
        assert counter.eval() == 1.0
    assert tf.get_default_session() is None
    with pytest.raises(RuntimeError, match="closed Session"):
        sess.run(a)
    with pytest.raises(ValueError, match="without a session"):
        a.eval()


def test_eval_with_explicit_session(graph_ab):
    _, b = graph_ab
    sess = tf.Session()
    assert_equal(b.eval(session=sess), [2, 4])
    sess.close()


def test_with_session_makes_its_graph_the_default():
    graph = tf.Graph()
    with tf.Session(graph=graph) as sess:
        assert tf.get_default_graph() is graph
        c = tf.constant(1.0)
        assert sess.run(c) == 1.0
    assert tf.get_default_graph() is not graph


def test_interactive_session_is_default_until_closed(graph_ab):
    _, b = graph_ab
    sess = tf.InteractiveSession()
    assert tf.get_default_session() is sess
    assert_equal(b.eval(), [2, 4])
    sess.close()
    assert tf.get_default_session() is None
    with pytest.raises(ValueError, match="without a session"):
        b.eval()


# --- plan caching --------------------------------------------------------------

@pytest.fixture
def plan_count(monkeypatch):
    """How many Plans have been compiled since the fixture was set up."""
    count = [0]
    original_init = plan_module.Plan.__init__

    def counting_init(self, *args, **kwargs):
        count[0] += 1
        original_init(self, *args, **kwargs)
    monkeypatch.setattr(plan_module.Plan, "__init__", counting_init)
    return lambda: count[0]


def test_one_signature_compiles_once(graph_ab, plan_count):
    a, b = graph_ab
    x = tf.placeholder(tf.float32, [2], name="x")
    y = b + x
    with tf.Session() as sess:
        for step in range(5):
            assert_equal(sess.run(y, feed_dict={x: [step, step]}), [2 + step, 4 + step])
        assert plan_count() == 1
        sess.run([y, a], feed_dict={x: [0, 0]})  # another fetch: another plan
        assert plan_count() == 2
        sess.run(b, feed_dict={a: [0, 0]})       # another feed: another plan
        assert plan_count() == 3
        sess.run([y, a], feed_dict={x: [0, 0]})
        sess.run(b, feed_dict={a: [0, 0]})
        assert plan_count() == 3


def test_nested_structures_are_cached_too(graph_ab, plan_count):
    a, b = graph_ab
    with tf.Session() as sess:
        for _ in range(3):
            result = sess.run({"pair": Pair(a, b), "list": [b]})
        assert plan_count() == 1
    assert_equal(result["pair"].second, [2, 4])


def test_each_session_compiles_its_own_plans(graph_ab, plan_count):
    a, _ = graph_ab
    for _ in range(2):
        with tf.Session() as sess:
            sess.run(a)
            sess.run(a)
    assert plan_count() == 2


# --- fetched values are the caller's -------------------------------------------

def test_fetched_variable_value_is_a_copy():
    weight = tf.Variable([1.0, 2.0], name="weight")
    with tf.Session() as sess:
        sess.run(weight.initializer)
        value = sess.run(weight)
        value[0] = 100.0
        assert_equal(sess.run(weight), [1, 2])
        updated = sess.run(weight.assign_add([1.0, 1.0]))
        updated[:] = -1.0
        assert_equal(sess.run(weight), [2, 3])


def test_fetched_constant_value_is_a_copy(graph_ab):
    a, _ = graph_ab
    with tf.Session() as sess:
        value = sess.run(a)
        value[:] = 0.0
        assert_equal(sess.run(a), [1, 2])
        assert_equal(sess.run(tf.identity(a)), [1, 2])


# --- devices -------------------------------------------------------------------

@pytest.fixture
def copy_spy(monkeypatch):
    """Records (input, output) of every NumpyDevice.copy_from call."""
    calls = []
    original = NumpyDevice.copy_from

    def spy(value, source_device):
        result = original(value, source_device)
        calls.append((value, result))
        return result
    monkeypatch.setattr(NumpyDevice, "copy_from", staticmethod(spy))
    return calls


def test_value_crossing_logical_cpus_is_really_copied(no_gpu, logical_cpus, copy_spy):
    with tf.device("/cpu:1"):
        x = tf.placeholder(tf.float32, [2], name="x")
        produced = tf.multiply(x, 2.0, name="produced")
    with tf.device("/cpu:0"):
        consumed = tf.add(produced, 1.0, name="consumed")
    with tf.Session() as sess:
        assert_equal(sess.run(consumed, feed_dict={x: [1, 2]}), [3, 5])
        assert len(copy_spy) == 1
        assert_equal(sess.run(consumed, feed_dict={x: [3, 4]}), [7, 9])
    assert len(copy_spy) == 2  # every run copies again: nothing is cached
    for source, copied in copy_spy:
        assert not np.shares_memory(source, copied)
    assert_equal(copy_spy[1][0], [6, 8])


def test_values_on_one_device_are_not_copied(no_gpu, logical_cpus, copy_spy):
    with tf.device("/cpu:2"):
        x = tf.placeholder(tf.float32, [2], name="x")
        out = x * 2.0 + 1.0
    with tf.Session() as sess:
        assert_equal(sess.run(out, feed_dict={x: [1, 2]}), [3, 5])
    assert copy_spy == []


def test_device_count_limits_the_logical_cpus(no_gpu, logical_cpus):
    with tf.device("/cpu:1"):
        allowed = tf.constant(1.0, name="allowed")
    with tf.device("/cpu:3"):
        hidden = tf.constant(2.0, name="hidden")
    config = tf.ConfigProto(device_count={"CPU": 2})
    with tf.Session(config=config) as sess:
        assert len(sess.list_devices()) == 2
        assert sess.run(allowed) == 1.0
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            sess.run(hidden)
    message = str(info.value)
    assert "Cannot assign a device for operation 'hidden'" in message
    assert "'/device:CPU:3'" in message
    assert "/job:localhost/replica:0/task:0/device:CPU:1" in message
    with tf.Session() as sess:  # without the limit all four CPUs exist
        assert sess.run(hidden) == 2.0


def test_fetching_a_fed_tensor_returns_a_copy_of_the_callers_array():
    x = tf.placeholder(tf.float32, [3])
    view = tf.reshape(x, [3, 1])
    fed = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    got_x, got_view = tf.Session().run([x, view], feed_dict={x: fed})
    assert not np.shares_memory(got_x, fed) and not np.shares_memory(got_view, fed)
    np.testing.assert_array_equal(got_view[:, 0], fed)


def test_device_count_gives_that_many_cpu_devices_as_tf1(no_gpu, capsys):
    towers = []
    for index in range(3):
        with tf.device(f"/cpu:{index}"):
            towers.append(tf.constant(float(index), name=f"tower_{index}") * 2.0)
    total = tf.add_n(towers)
    config = tf.ConfigProto(device_count={"CPU": 3}, log_device_placement=True)
    with tf.Session(config=config) as sess:
        assert [device.short_name for device in sess.list_devices()] == \
            ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2"]
        assert sess.run(total) == 6.0
    assert "tower_2: /job:localhost/replica:0/task:0/device:CPU:2" in capsys.readouterr().err
    with tf.Session() as sess:   # the process itself still has one CPU
        assert len(sess.list_devices()) == 1
        with pytest.raises(tf.errors.InvalidArgumentError, match="'/device:CPU:1'"):
            sess.run(total)
