"""``cupy.ndarray`` on the simulated GPUs, and the launch of work on them.

An array is a NumPy view into one device :class:`~.memory.Block`, on the
device it was made on. Every function of the simulated ``cupy`` module runs
through :func:`launch`: it checks that the arrays live on the current device
(as CuPy does), then either runs the NumPy computation now on the current
stream (checking and recording each block's reads and writes, see
:mod:`.clock`), or, while the stream captures, records it into the graph and
leaves the outputs unwritten (poisoned) until a replay.

As in CuPy, a NumPy array is never taken where a device array is expected
(TypeError), an array never turns into a NumPy array implicitly
(``np.asarray(x)`` raises TypeError), and reading a value on the host
(``bool(x)``, ``x.item()``, ``x.get()``) is a synchronous copy on the
current stream, refused while a stream captures.
"""

import numbers

import numpy as np

from . import clock as clocks
from . import state
from .memory import MemoryPointer
from .pinned import PinnedArray
from .work import Work, replayable, submit


def host_read(array, stream=None):
    """A synchronous device-to-host copy of ``array`` (a NumPy copy)."""
    world = state.world()
    stream = world.current_stream() if stream is None else stream
    world.refuse_during_capture(f"a device-to-host copy of a {array.shape} array", stream)
    copied = {}
    Work("device-to-host copy", lambda: copied.setdefault("value", array._view.copy()),
         reads=(array.data.block,)).execute(stream)
    world.host_waits_for(stream._done_clock())
    return copied["value"]


class ndarray:
    """cupy.ndarray on a simulated GPU."""

    __array_priority__ = 100

    def __init__(self, shape, dtype=float, memptr=None, strides=None, order="C"):
        dtype = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
        if memptr is None:
            memptr = allocate(int(np.prod(shape)) * dtype.itemsize)
        flat = memptr.block.buffer[memptr.offset:]
        count = int(np.prod(shape))
        view = flat[:count * dtype.itemsize].view(dtype)
        view = np.lib.stride_tricks.as_strided(view, shape, strides) if strides \
            else view.reshape(shape, order=order)
        _bind(self, view, memptr)

    # -- what it is ------------------------------------------------------------------

    shape = property(lambda self: self._view.shape)
    dtype = property(lambda self: self._view.dtype)
    ndim = property(lambda self: self._view.ndim)
    size = property(lambda self: self._view.size)
    itemsize = property(lambda self: self._view.itemsize)
    nbytes = property(lambda self: self._view.nbytes)
    strides = property(lambda self: self._view.strides)
    flags = property(lambda self: self._view.flags)

    @property
    def device(self):
        from .devices import Device
        return Device(self.data.device_id)

    @property
    def T(self):
        return self.transpose()

    def __len__(self):
        return len(self._view)

    def __repr__(self):
        return f"array({host_read(self)!r}, simulated GPU {self.data.device_id})"

    # -- conversions to the host -------------------------------------------------------

    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. "
                        "Please use `.get()` to construct a NumPy array explicitly.")

    def get(self, stream=None, order="C", out=None, blocking=True):
        value = host_read(self, stream)
        if out is not None:
            out[...] = value
            return out
        return np.asarray(value, order=order)

    def item(self):
        return host_read(self).item()

    def tolist(self):
        return host_read(self).tolist()

    def __bool__(self):
        return bool(host_read(self))

    def __int__(self):
        return int(host_read(self))

    def __float__(self):
        return float(host_read(self))

    def __index__(self):
        return host_read(self).__index__()

    def set(self, arr, stream=None):
        """Copy the host array ``arr`` in; asynchronous on ``stream`` (given a
        pinned buffer, which the host must not write until the copy is done)."""
        if isinstance(arr, ndarray) or not isinstance(arr, np.ndarray):
            raise TypeError(f"Only numpy.ndarray can be set to cupy.ndarray, got {type(arr)}")
        if arr.shape != self.shape:
            raise ValueError(f"Shape mismatch. Old shape: {self.shape}, new shape: {arr.shape}")
        if arr.dtype != self.dtype:     # CuPy copies bytes: no cast
            raise TypeError(f"{arr.dtype} array cannot be set to {self.dtype} array")
        if not self._view.flags.c_contiguous:
            raise RuntimeError("Cannot set to non-contiguous array")
        world = state.world()
        stream = world.current_stream() if stream is None else stream
        pinned = (arr,) if isinstance(arr, PinnedArray) else ()
        source = arr if pinned else arr.copy()      # pageable: staged at the call
        view = self._view
        work = Work("host-to-device copy", lambda: _assign(view, source),
                    writes=(self.data.block,), host_reads=pinned)
        graph = world.capture_of(stream)
        if graph is not None:
            if not pinned:
                raise clocks.capture_error("a copy from pageable host memory")
            graph._add(replayable(work, graph), stream)
        else:
            work.execute(stream)

    # -- everything else runs through launch() --------------------------------------------

    def __getattr__(self, name):
        method = getattr(np.ndarray, name, None)
        if name.startswith("_") or not callable(method):
            raise AttributeError(f"'cupy.ndarray' object has no attribute '{name}'")
        in_place = name in _IN_PLACE_METHODS
        return lambda *args, **kwargs: launch(method, (self, *args), kwargs, name,
                                              written=(self,) if in_place else ())

    def __getitem__(self, index):
        if _is_mask(index):             # the result's size is read on the host
            state.world().refuse_during_capture("boolean-mask indexing (its size is read "
                                                "on the host)")
        elif _picks_one_element(index, self.ndim):
            index = (*index, Ellipsis) if isinstance(index, tuple) else (index, Ellipsis)
        return launch(np.ndarray.__getitem__, (self, index), {}, "getitem")

    def copy(self, order="C"):
        """A copy on the current GPU, as CuPy's: from another GPU too (see
        :func:`peer_copy`)."""
        if self.data.device_id != state.world().current_device:
            return peer_copy(self, order)
        return launch(np.ndarray.copy, (self, order), {}, "copy")

    def nonzero(self):
        state.world().refuse_during_capture("nonzero (its size is read on the host)")
        return launch(np.ndarray.nonzero, (self,), {}, "nonzero")

    def __setitem__(self, index, value):
        launch(np.ndarray.__setitem__, (self, index, value), {}, "setitem", written=(self,))

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        function = ufunc if method == "__call__" else getattr(ufunc, method)
        return launch(function, inputs, kwargs, ufunc.__name__)

    def __array_function__(self, func, types, args, kwargs):
        return launch(func, args, kwargs, func.__name__)


def _is_mask(index):
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(item, ndarray) and item.dtype == np.bool_ for item in items)


def _picks_one_element(index, ndim):
    """Whether ``index`` names one element (NumPy gives a copy; CuPy a 0-d view)."""
    items = index if isinstance(index, tuple) else (index,)
    return len(items) == ndim and all(isinstance(item, numbers.Integral) for item in items)


def _binary(ufunc, reflected=False, in_place=False):
    def operator(self, other):
        args = (other, self) if reflected else (self, other)
        if in_place:
            return launch(ufunc, args, {"out": self}, ufunc.__name__)
        return launch(ufunc, args, {}, ufunc.__name__)
    return operator


_OPERATORS = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
              "truediv": np.true_divide, "floordiv": np.floor_divide, "mod": np.remainder,
              "pow": np.power, "matmul": np.matmul, "and": np.bitwise_and,
              "or": np.bitwise_or, "xor": np.bitwise_xor, "lshift": np.left_shift,
              "rshift": np.right_shift}
for _name, _ufunc in _OPERATORS.items():
    setattr(ndarray, f"__{_name}__", _binary(_ufunc))
    setattr(ndarray, f"__r{_name}__", _binary(_ufunc, reflected=True))
    setattr(ndarray, f"__i{_name}__", _binary(_ufunc, in_place=True))
for _name, _ufunc in {"lt": np.less, "le": np.less_equal, "gt": np.greater,
                      "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal}.items():
    setattr(ndarray, f"__{_name}__", _binary(_ufunc))
ndarray.__neg__ = lambda self: launch(np.negative, (self,), {}, "negative")
ndarray.__pos__ = lambda self: launch(np.positive, (self,), {}, "positive")
ndarray.__abs__ = lambda self: launch(np.absolute, (self,), {}, "absolute")
ndarray.__invert__ = lambda self: launch(np.invert, (self,), {}, "invert")
ndarray.__hash__ = None

_IN_PLACE_METHODS = {"fill", "sort", "partition", "put", "itemset", "setfield"}


def _bind(array, view, memptr):
    array._view, array.data = view, memptr
    return array


def _assign(destination, value):
    destination[...] = value


def allocate(nbytes):
    """A MemoryPointer from the current allocator, on the current device."""
    memptr = state.allocator()(max(int(nbytes), 0))
    world = state.world()
    if memptr.device_id != world.current_device:
        raise ValueError(f"the allocator gave memory on GPU {memptr.device_id} while GPU "
                         f"{world.current_device} is current")
    return memptr


# -- copies between GPUs -------------------------------------------------------------------


def peer_copy(source, order="K"):
    """A copy on the current GPU of ``source``, an array of another GPU, made
    as CuPy 14's ``ndarray.copy`` makes it (``cupy.array`` and ``cupy.asarray``
    call it with order 'K'): laid out per ``order`` on the source GPU first,
    on *that* GPU's current stream, then one peer memcpy on the current
    stream. A memcpy takes only C- or F-contiguous memory: with order 'K' a
    strided view is refused, with CuPy's NotImplementedError."""
    if source.size == 0:
        return ndarray(source.shape, source.dtype)
    laid_out = _in_order_on_its_gpu(source, str(order).upper())
    flags = laid_out._view.flags
    if not (flags.c_contiguous or flags.f_contiguous):
        raise NotImplementedError("CuPy cannot copy non-contiguous array between devices.")
    copied = ndarray(laid_out.shape, laid_out.dtype, order="C" if flags.c_contiguous else "F")
    target, values = copied._view, laid_out._view
    submit(Work("peer copy", lambda: _assign(target, values),
                reads=(laid_out.data.block,), writes=(copied.data.block,)))
    return copied


def _in_order_on_its_gpu(source, order):
    """``source`` as CuPy's ``astype(order=order, copy=False)`` leaves it,
    computed (when a copy is needed) on the source's GPU and current stream."""
    flags = source._view.flags
    keeps = {"K": True, "A": flags.c_contiguous or flags.f_contiguous,
             "C": flags.c_contiguous, "F": flags.f_contiguous}
    if order not in keeps:
        raise ValueError(f"order not understood. order={order}")
    if keeps[order]:
        return source
    layout = "F" if order == "F" or (order == "A" and flags.f_contiguous) else "C"
    from .devices import Device
    with Device(source.data.device_id):
        return launch(np.array, (source,), {"copy": True, "order": layout}, "astype")


# -- launching NumPy computations as device work ----------------------------------------------


def launch(function, args, kwargs, name, written=(), cross_device=False):
    """Run ``function`` (a NumPy callable) on device arrays as one kernel."""
    world = state.world()
    arrays = []
    numpy_args = _unwrap(args, arrays)
    numpy_kwargs = _unwrap(kwargs, arrays)
    outs = _out_arrays(kwargs) + list(written)
    _check_devices(arrays + outs, world.current_device, name, cross_device)
    capturing = world.capture_of(world.current_stream()) is not None
    # NOTE: computed now for the result's shapes; a capture runs nothing, so
    # memory written in place is put back as it was.
    saved = [(block, block.buffer.copy()) for block in _blocks(outs)] if capturing else []
    with np.errstate(all="ignore"):
        result = function(*numpy_args, **numpy_kwargs)
    for block, contents in saved:
        block.buffer[...] = contents
    wrapped, fresh = _wrap_result(result, arrays)
    if not fresh and not outs:
        return wrapped             # views and metadata only: no device work
    first = [] if capturing else [result]   # a replay computes on its own inputs
    # NOTE: the work holds NumPy views, never the arrays (see work.replayable).
    fresh_views = [(position, array._view) for position, array in fresh]

    def run():
        if first:
            values = first.pop()
        else:
            with np.errstate(all="ignore"):
                values = function(*numpy_args, **numpy_kwargs)
        _store(fresh_views, values)
    writes = _blocks(outs) + [array.data.block for _, array in fresh]
    submit(Work(name, run, reads=_blocks(arrays), writes=writes))
    out = _the_out_array(kwargs)
    return wrapped if out is None else out


def _the_out_array(kwargs):
    """The array given as ``out=`` (a ufunc returns that very array), or None."""
    out = kwargs.get("out")
    if isinstance(out, tuple) and len(out) == 1:
        out = out[0]
    return out if isinstance(out, ndarray) else None


def _blocks(arrays):
    return list({id(array.data.block): array.data.block for array in arrays}.values())


def _unwrap(value, found):
    if isinstance(value, ndarray):
        found.append(value)
        return value._view
    if isinstance(value, np.ndarray):
        raise TypeError(f"Unsupported type {np.ndarray}")
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(item, found) for item in value)
    if isinstance(value, dict):
        return {key: _unwrap(item, found) for key, item in value.items()}
    return value


def _out_arrays(kwargs):
    out = kwargs.get("out")
    if out is None:
        return []
    return [item for item in (out if isinstance(out, tuple) else (out,))
            if isinstance(item, ndarray)]


def _check_devices(arrays, current, name, cross_device):
    for array in arrays:
        if array.data.device_id != current and not cross_device:
            raise ValueError(
                f"Array device must be same as the current device: array device = "
                f"{array.data.device_id} while current = {current} (in '{name}')")


def _owner(view, arrays):
    """The input array whose memory ``view`` lies in (by address), or None."""
    address = view.__array_interface__["data"][0]
    for array in arrays:
        buffer = array.data.block.buffer
        start = buffer.__array_interface__["data"][0]
        if start <= address < start + buffer.nbytes and view.size:
            return array
        if view.size == 0 and address == start:
            return array
    return None


def _items(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _wrap_result(result, arrays):
    """Device arrays for ``result``: views of an input's memory stay views;
    other arrays get new memory, listed as (position, array) in ``fresh``."""
    wrapped, fresh = [], []
    for position, value in enumerate(_items(result)):
        if isinstance(value, np.generic):
            value = np.asarray(value)
        if not isinstance(value, np.ndarray):
            wrapped.append(value)
            continue
        owner = _owner(value, arrays)
        if owner is not None:
            wrapped.append(view_of(owner, value))
            continue
        made = ndarray(value.shape, value.dtype)
        fresh.append((position, made))
        wrapped.append(made)
    if isinstance(result, (tuple, list)):
        return type(result)(wrapped), fresh
    return wrapped[0], fresh


def view_of(owner, view):
    """A device array for ``view``, a NumPy view into ``owner``'s memory."""
    offset = view.__array_interface__["data"][0] - \
        owner.data.block.buffer.__array_interface__["data"][0]
    return _bind(ndarray.__new__(ndarray), view, MemoryPointer(owner.data.mem, offset))


def _store(fresh_views, result):
    items = _items(result)
    for position, view in fresh_views:
        view[...] = items[position]
