"""Sessions: run fetches of a graph on the configured devices.

::

    with tf.Session(config=tf.ConfigProto(log_device_placement=True)) as sess:
        print(sess.run(c))                       # [[22. 28.] [49. 64.]]
        sess.run([a, {"c": c}], feed_dict={x: batch})
"""

import contextlib
import threading

from . import backends, errors, plan_capture, switches, tracing
from .backends.cpu_threads import intra_op_threads
from .backends.queues import deadline_after
from .device import runtime
from .device.visible_list import gpus_in_listed_order
from .graph import core
from .log import logger
from .placement import Placer, log_lines
from .plan import Plan
from .session_fetch import FetchMapper, expand_feeds, flat_feed_dict, structure_key


class GPUOptions:
    """TensorFlow's GPU options; ``visible_device_list`` ('1', '0,1') picks the
    process's GPUs by index and numbers them in its order (device/visible_list.py)."""

    def __init__(self, allow_growth=False, per_process_gpu_memory_fraction=0.0,
                 visible_device_list=""):
        self.allow_growth = allow_growth
        self.per_process_gpu_memory_fraction = per_process_gpu_memory_fraction
        self.visible_device_list = visible_device_list


class ConfigProto:
    """Session options: ``tf.ConfigProto(log_device_placement=True,
    allow_soft_placement=True, device_count={'GPU': 0})``.

    ``operation_timeout_in_ms``: how long an op may block (a dequeue from an
    empty queue, an enqueue into a full one) before DeadlineExceededError;
    0: no limit, as in TF.

    ``intra_op_parallelism_threads``: how many threads one op's work is
    split across on the CPU in this Session's runs (its kernels and BLAS);
    0: the CPU pool's own count (TOWERFLOW_CPU_THREADS, else the usable
    cores), which it can only lower. ``inter_op_parallelism_threads`` is
    accepted and changes nothing: a plan runs its ops one after another.

    ``cuda_graphs`` (towerflow's own): capture plans that run on a GPU into
    CUDA graphs from their second run (see :mod:`towerflow.plan_capture`)."""

    def __init__(self, log_device_placement=False, allow_soft_placement=False,
                 device_count=None, gpu_options=None, intra_op_parallelism_threads=0,
                 inter_op_parallelism_threads=0, cuda_graphs=True, operation_timeout_in_ms=0):
        self.log_device_placement = log_device_placement
        self.allow_soft_placement = allow_soft_placement
        self.device_count = dict(device_count or {})
        self.gpu_options = gpu_options or GPUOptions()
        self.intra_op_parallelism_threads = _thread_count(
            "intra_op_parallelism_threads", intra_op_parallelism_threads)
        self.inter_op_parallelism_threads = inter_op_parallelism_threads
        self.cuda_graphs = bool(cuda_graphs)
        self.operation_timeout_in_ms = int(operation_timeout_in_ms)


def _thread_count(name, value):
    """``value`` as a thread count (an int >= 0), else a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"ConfigProto({name}={value!r}): expected a number of threads, "
                         "an int >= 0 (0: the default)")
    return value


_default_session_stack = []


def get_default_session():
    """The innermost session entered with ``with sess:`` / ``sess.as_default()``."""
    return _default_session_stack[-1] if _default_session_stack else None


core.set_default_session_lookup(get_default_session)


class Session:
    """Runs a graph. Each Session keeps its own variable values and random
    streams; plans are compiled once per (fetches, feed keys) and reused."""

    def __init__(self, target="", graph=None, config=None):
        if target:
            raise errors.UnimplementedError(
                None, None, f"Session target {target!r}: only in-process sessions ('') "
                "exist; use towerflow's launcher for several processes")
        switches.check()        # a mistyped TOWERFLOW_* value stops here, not in an op
        self.graph = graph if graph is not None else core.get_default_graph()
        self._config = config if config is not None else ConfigProto()
        self._devices = _session_devices(self._config)
        self._placer = Placer(self._devices, self._config.allow_soft_placement)
        self._runtimes = {}
        self._state = {}
        self._plans = {}
        self._traced_plans = {}     # compiled apart: no fusion, no CUDA graphs
        self._logged = set()
        self._closed = False
        self._context_stack = []
        # NOTE: queue runner threads run plans of this Session beside the main
        # thread: compiling and creating Session state happen under this lock.
        self._lock = threading.RLock()
        self._blocking_timeout_ms = self._config.operation_timeout_in_ms
        self._intra_op_threads = getattr(self._config, "intra_op_parallelism_threads", 0)
        if self._config.log_device_placement:
            for line in runtime.device_mapping_lines():
                logger.info(line)

    # -- running --------------------------------------------------------------------

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Evaluate ``fetches`` (a tensor, op, variable, name, or any nesting of
        lists, tuples, namedtuples, dicts of them) and return values in the
        same structure. A ``feed_dict`` key may be a nested tuple of tensors
        (an ``LSTMStateTuple``), fed a value of the same structure.

        ``options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)`` with a
        ``run_metadata=tf.RunMetadata()`` traces the run: its op-by-op step
        stats land in ``run_metadata.step_stats`` (see towerflow/tracing.py).
        Safe to call from several threads at once (queue runners do).
        ``options``: a ``RunOptions``; its ``timeout_in_ms`` bounds how long a
        blocking op (a queue's dequeue or enqueue) waits in this run."""
        if self._closed:
            raise RuntimeError("Attempted to use a closed Session.")
        if feed_dict:
            # tuple keys leaf by leaf, then a SparseTensor's three tensors
            feed_dict = expand_feeds(flat_feed_dict(feed_dict))
        if run_metadata is not None and getattr(options, "trace_level", 0):
            with self._deadline(options), intra_op_threads(self._intra_op_threads):
                return self._run_traced(fetches, feed_dict or {}, run_metadata)
        # The hot path: the cache lookup inline (see _cached_plan). Compiling
        # happens outside the lookup's ``except``, so an error raised while
        # compiling is not chained to the cache miss.
        try:
            compiled = self._plans.get((structure_key(fetches),
                                        tuple(feed_dict) if feed_dict else ()))
        except TypeError:
            compiled = None     # unhashable fetch structure: never cached
        plan, mapper = compiled or self._compile(fetches, feed_dict or {})
        feed_values = feed_dict.values() if feed_dict else ()
        if options is None and not self._blocking_timeout_ms and not self._intra_op_threads:
            return mapper.build(plan.run(feed_values))
        with self._deadline(options), intra_op_threads(self._intra_op_threads):
            return mapper.build(plan.run(feed_values))

    @staticmethod
    def _cached_plan(plans, fetches, feed_dict):
        """What ``plans`` holds for these fetches and feed keys, or None."""
        feed_keys = tuple(feed_dict) if feed_dict else ()
        try:
            return plans.get((structure_key(fetches), feed_keys))
        except TypeError:
            return None  # unhashable fetch structure: never cached

    def _deadline(self, options):
        """How long a blocking op may wait in this run: ``options.timeout_in_ms``,
        else the config's ``operation_timeout_in_ms`` (none when both are 0)."""
        timeout_ms = getattr(options, "timeout_in_ms", 0) or self._blocking_timeout_ms
        return deadline_after(timeout_ms / 1000) if timeout_ms > 0 else \
            contextlib.nullcontext()

    def _run_traced(self, fetches, feed_dict, run_metadata):
        compiled = self._cached_plan(self._traced_plans, fetches, feed_dict)
        if compiled is None:
            with self._lock:
                compiled = self._compile_traced(fetches, feed_dict)
        tracer, mapper = compiled
        values, step_stats = tracer.run(feed_dict.values())
        run_metadata.step_stats.CopyFrom(step_stats)    # replaced, as TF's each traced run
        return mapper.build(values)

    def _compile_traced(self, fetches, feed_dict):
        plan, mapper = self._new_plan(fetches, feed_dict, fuse=False)
        tracer = tracing.PlanTracer(plan)
        with contextlib.suppress(TypeError):    # unhashable fetches: compiled each run
            self._traced_plans[(structure_key(fetches), tuple(feed_dict))] = (tracer, mapper)
        return tracer, mapper

    def _compile(self, fetches, feed_dict):
        with self._lock:
            return self._compile_locked(fetches, feed_dict)

    def _compile_locked(self, fetches, feed_dict):
        plan, mapper = self._new_plan(fetches, feed_dict)
        if plan_capture.enabled(self._config) and plan_capture.can_capture(plan):
            plan = plan_capture.CapturingPlan(plan, plan_capture.session_cells(self._state),
                                              _describe(mapper.targets))
        try:
            self._plans[(structure_key(fetches), tuple(feed_dict))] = (plan, mapper)
        except TypeError:
            pass  # unhashable fetch structure: compiled again on each run
        return plan, mapper

    def _new_plan(self, fetches, feed_dict, fuse=True):
        """(Plan, FetchMapper) of ``fetches`` given ``feed_dict``'s keys."""
        mapper = FetchMapper(self.graph, fetches)
        feeds = [self._feed_tensor(key) for key in feed_dict]
        _check_outside_bodies(mapper.targets, feeds)
        plan = Plan(mapper.targets, feeds, self._placer, self._runtime_of, self._resource,
                    fuse=fuse)
        self._log_new_placements(plan)
        return plan, mapper

    def _feed_tensor(self, key):
        try:
            element = self.graph.as_graph_element(key, allow_operation=False)
        except (KeyError, ValueError, TypeError) as err:
            raise errors.InvalidArgumentError(
                None, None, f"Cannot interpret feed_dict key {key!r} as a Tensor of "
                f"this graph: {err}") from None
        return element

    def _runtime_of(self, device):
        device_runtime = self._runtimes.get(device)
        if device_runtime is None:
            device_runtime = self._runtimes[device] = backends.device_runtime(device)
        return device_runtime

    def _resource(self, key, factory):
        value = self._state.get(key)
        if value is None:
            with self._lock:
                value = self._state.get(key)
                if value is None:
                    value = self._state[key] = factory()
        return value

    def _log_new_placements(self, plan):
        if not self._config.log_device_placement:
            return
        new = [(op, self._placer.place(op)) for op in plan.ops + plan.body_ops
               if op not in self._logged]
        self._logged.update(op for op, _ in new)
        for line in log_lines(new):
            logger.info(line)

    # -- lifetime and defaults ------------------------------------------------------

    def list_devices(self):
        """The logical devices this session places ops on."""
        return list(self._devices)

    def close(self):
        """Free this Session's state; ops blocked in it (a dequeue waiting on a
        queue runner) end with CancelledError."""
        self._closed = True
        with self._lock:
            for value in list(self._state.values()):
                if hasattr(value, "cancel_waits"):
                    value.cancel_waits()
            self._plans.clear()
            self._traced_plans.clear()
            self._state.clear()
            runtimes, self._runtimes = list(self._runtimes.values()), {}
        _release_memory(runtimes)

    @contextlib.contextmanager
    def as_default(self):
        """Make this the default session (for ``Tensor.eval`` / ``Operation.run``)."""
        _default_session_stack.append(self)
        try:
            yield self
        finally:
            _default_session_stack.remove(self)

    def __enter__(self):
        stack = contextlib.ExitStack()
        stack.enter_context(self.graph.as_default())
        stack.enter_context(self.as_default())
        self._context_stack.append(stack)
        return self

    def __exit__(self, *exc_info):
        self._context_stack.pop().close()
        self.close()


class InteractiveSession(Session):
    """A Session that installs itself as the default session until closed."""

    def __init__(self, target="", graph=None, config=None):
        super().__init__(target, graph, config)
        _default_session_stack.append(self)

    def close(self):
        if self in _default_session_stack:
            _default_session_stack.remove(self)
        super().close()


def _release_memory(runtimes):
    """Give the devices back the memory a closed Session's runtimes cache (a
    GPU's pool keeps freed blocks for reuse): a program that opens Session
    after Session must not grow."""
    for device_runtime in runtimes:
        release = getattr(device_runtime, "release_memory", None)
        if release is not None:
            release()


def _check_outside_bodies(targets, feeds):
    """TF 1.15's ValueErrors for a fetch or feed inside a tf.while_loop or
    tf.cond body: its ops run only in the body's own plan (a feed there
    would be silently ignored)."""
    for target in targets:
        op = target if isinstance(target, core.Operation) else target.op
        if op._body is not None:
            raise ValueError(f"Operation {op.name!r} has been marked as not fetchable. It is "
                             f"{_inside(op)}: fetch the loop's or cond's outputs instead")
    for tensor in feeds:
        if tensor.op._body is not None:
            raise ValueError(f"Tensor {tensor.name} may not be fed. It is {_inside(tensor.op)}: "
                             "feed a tensor the loop or cond reads instead")


def _inside(op):
    return f"inside the body of a tf.while_loop or tf.cond ({op._body.name})"


def _describe(targets):
    names = [target.name for target in targets[:3]]
    more = f" and {len(targets) - 3} more" if len(targets) > 3 else ""
    return f"fetches [{', '.join(names)}]{more}"


def _session_devices(config):
    """The logical devices, limited by ``device_count`` ({'GPU': 0} hides GPUs);
    ``{'CPU': N}`` gives exactly N CPUs, adding logical CPUs past the process's;
    ``gpu_options.visible_device_list`` picks and orders the GPUs."""
    devices = gpus_in_listed_order(runtime.logical_devices(),
                                   getattr(config.gpu_options, "visible_device_list", ""))
    limits = {kind.upper(): int(count) for kind, count in config.device_count.items()}
    for kind, count in limits.items():
        if kind not in ("CPU", "GPU") or count < 0:
            raise ValueError(f"device_count {config.device_count!r}: keys must be 'CPU' "
                             "or 'GPU' and counts >= 0")
    kept = []
    for device in devices:
        limit = limits.get(device.device_type)
        if limit is None or device.index < limit:
            kept.append(device)
    cpus = [device for device in kept if device.device_type == "CPU"]
    if not cpus:
        raise ValueError("device_count must leave at least one CPU")
    extra = [runtime.extra_logical_cpu(index)
             for index in range(len(cpus), limits.get("CPU", len(cpus)))]
    return cpus + extra + [device for device in kept if device.device_type != "CPU"]
