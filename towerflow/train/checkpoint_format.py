"""The checkpoint file format and the ``checkpoint`` state file (see saver.py).

One checkpoint is one ``.npz`` file read with ``allow_pickle=False``: entries
``v0, v1, ...`` hold the variables, ``x0, ...`` the arrays of ``extra_state``,
``__header__`` a UTF-8 JSON header (format, version, global step, per entry
its logical name, dtype, shape and SHA-256, and the JSON part of
``extra_state``) and ``__header_sha256__`` the header's SHA-256. A bfloat16
array is stored as its uint16 bits, its dtype ``'bfloat16'`` in the header. Writes are
atomic: a hidden temporary file in the same directory, fsynced, then renamed.
"""

import collections
import contextlib
import glob
import hashlib
import json
import os
import re
import secrets
import signal

import ml_dtypes
import numpy as np

from .. import errors
from ..dtypes import is_bfloat16
from ..log import logger
from . import sstable, tensor_bundle

FORMAT = "towerflow.checkpoint"
VERSION = 1
STATE_FILENAME = "checkpoint"
_HEADER, _HEADER_SUM = "__header__", "__header_sha256__"
_ARRAY_REF = "__towerflow_array__"
_TOWER_PREFIX = re.compile(r"^tower_(\d+)/")
# A hidden test hook for fault injection (tests/fault_injection.py): "POINT@N"
# makes the process SIGKILL itself the N-th time (default 1) a write reaches
# POINT, so a test can stop a run between the writer's steps.
KILL_AT_ENV = "TOWERFLOW_TEST_KILL_AT"
KILL_POINTS = ("checkpoint-temporary",   # the .npz written and fsynced, not yet renamed
               "checkpoint-renamed",     # under its name; the state file not yet updated
               "state-temporary",        # the new state file written, not yet renamed
               "state-renamed")          # the state file updated; old files not yet pruned
_points_reached = collections.Counter()


def logical_name(name):
    """The device-independent name of a variable: ``'tower_2/dense/kernel/Momentum'``
    -> ``'dense/kernel/Momentum'``; other names are kept as they are."""
    return _TOWER_PREFIX.sub("", name, count=1)


def _skip_warning(path, err):
    logger.warning("towerflow: skipping checkpoint %s: %s", path, err)
    return f"{path}: {err}"


# -- the file format -------------------------------------------------------------------

Checkpoint = collections.namedtuple(
    "Checkpoint", ["path", "global_step", "variables", "extra_state"])


def _sha256(array):
    return hashlib.sha256(np.ascontiguousarray(array).reshape(-1).view(np.uint8)).hexdigest()


def _dtype_name(array):
    # NOTE: NumPy writes ml_dtypes' bfloat16 to .npz files as raw 'V2' bytes,
    # which read back as void: bfloat16 is named here and stored as uint16 bits.
    return "bfloat16" if is_bfloat16(array.dtype) else array.dtype.str


def _stored(array):
    """``array`` as an .npz entry holds it (bfloat16 as its uint16 bits)."""
    return array.view(np.uint16) if is_bfloat16(array.dtype) else array


def _describe(key, array):
    return {"key": key, "dtype": _dtype_name(array), "shape": list(array.shape),
            "sha256": _sha256(array)}


def write_checkpoint(path, variables, global_step=None, extra_state=None, extra_arrays=()):
    """Write ``{name: array}`` (and the encoded extra state) to ``path``
    atomically."""
    entries, header = {}, {"format": FORMAT, "version": VERSION, "global_step": global_step,
                           "variables": {}, "extra_state": extra_state, "extra_arrays": {}}
    for index, (name, value) in enumerate(sorted(variables.items())):
        value = np.asarray(value)
        entries[f"v{index}"] = _stored(value)
        header["variables"][name] = _describe(f"v{index}", value)
    for key, value in dict(extra_arrays).items():
        entries[key] = _stored(value)
        header["extra_arrays"][key] = _describe(key, value)
    header_bytes = json.dumps(header, sort_keys=True).encode("utf-8")
    entries[_HEADER] = np.frombuffer(header_bytes, np.uint8)
    entries[_HEADER_SUM] = np.frombuffer(
        hashlib.sha256(header_bytes).hexdigest().encode("ascii"), np.uint8)
    _atomic_write(path, lambda stream: np.savez(stream, allow_pickle=False, **entries),
                  "checkpoint")


def read_checkpoint(save_path, with_variables=True):
    """A verified ``Checkpoint(path, global_step, variables, extra_state)``.
    NotFoundError if there is no such file, DataLossError naming the file if
    it is truncated or any checksum does not match."""
    path = _resolve(save_path)
    if path.endswith(tensor_bundle.INDEX_SUFFIX):
        return _read_bundle(path, with_variables)
    _check_zip(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            header = _read_header(npz, path)
            variables = {name: _read_entry(npz, meta, path, name)
                         for name, meta in header["variables"].items()} \
                if with_variables else {}
            arrays = {key: _read_entry(npz, meta, path, key)
                      for key, meta in header["extra_arrays"].items()}
    except errors.OpError:
        raise
    except Exception as err:   # NOTE: a damaged zip fails in many ways; all are data loss
        raise _data_loss(path, f"{type(err).__name__}: {err}") from err
    extra_state = _decode_extra_state(header["extra_state"], arrays)
    return Checkpoint(path, header["global_step"], variables,
                      extra_state if extra_state is not None else {})


def checkpoint_prefix(path):
    """TensorFlow's name of a checkpoint: its file's path without ``.npz`` or, for
    TF's format, ``.index`` (``'ckpt/model.ckpt-300'`` for
    ``'ckpt/model.ckpt-300.npz'``)."""
    return path.removesuffix(".npz").removesuffix(tensor_bundle.INDEX_SUFFIX)


def checkpoint_file(save_path):
    """The file holding the checkpoint ``save_path`` (a prefix or a file's
    path), or None: ``checkpoint_file('ckpt/model-3') == 'ckpt/model-3.npz'``; a
    checkpoint in TF's format is its index, ``'ckpt/model-3.index'``."""
    for path in (save_path + ".npz", tensor_bundle.index_filename(save_path), save_path):
        if os.path.isfile(path):
            return path
    return None


def remove_checkpoint(prefix):
    """Delete the files of the checkpoint ``prefix`` (either format); True if
    there were some. The index goes first: without it, no reader sees the rest."""
    paths = [prefix + ".npz", tensor_bundle.index_filename(prefix)]
    paths += sorted(glob.glob(glob.escape(prefix) + ".data-?????-of-?????"))
    removed = False
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
            removed = True
    return removed


def write_bundle(prefix, variables):
    """Write ``{name: array}`` as a checkpoint in TensorFlow's format (a tensor
    bundle: ``prefix.index`` and one data shard), each file atomically; the
    index, written last, is what makes the checkpoint exist."""
    data, index_items = tensor_bundle.bundle_files(variables)
    _atomic_write(tensor_bundle.data_filename(prefix, 0, 1),
                  lambda stream: stream.write(data), "checkpoint-data")
    _atomic_write(tensor_bundle.index_filename(prefix),
                  lambda stream: sstable.write_table(stream, index_items), "checkpoint")
    with contextlib.suppress(FileNotFoundError):   # an older .npz would be read first
        os.remove(prefix + ".npz")


def _read_bundle(index_path, with_variables):
    """A ``Checkpoint`` of a tensor bundle: every tensor read and its CRC-32C
    verified; the global step is its ``global_step`` tensor when it has one."""
    prefix = checkpoint_prefix(index_path)
    try:
        reader = tensor_bundle.BundleReader(prefix)
        names = list(reader.shapes()) if with_variables else \
            [name for name in ("global_step",) if name in reader.entries]
        variables = {name: reader.tensor(name) for name in names}
    except (errors.DataLossError, errors.NotFoundError) as err:
        raise _data_loss(index_path, err.message) from err
    step = variables.get("global_step")
    global_step = int(step) if step is not None and step.ndim == 0 and \
        step.dtype.kind in "iu" else None
    if not with_variables:
        variables = {}
    return Checkpoint(index_path, global_step, variables, {})


def checkpoint_exists(checkpoint_prefix):
    """Whether a checkpoint is saved under ``checkpoint_prefix`` (TF1's
    ``tf.train.checkpoint_exists``): ``checkpoint_exists('ckpt/model-300')``."""
    return checkpoint_file(checkpoint_prefix) is not None


def _resolve(save_path):
    path = checkpoint_file(save_path)
    if path is not None:
        return path
    raise errors.NotFoundError(None, None, f"Checkpoint {save_path} not found (no file "
                               f"{save_path} or {save_path}.npz)")


_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")     # a zip's first entry, or an empty zip


def _check_zip(path):
    """DataLossError unless ``path`` starts as a zip does: NumPy would take any
    other file for a pickle and suggest loading it unsafely."""
    try:
        with open(path, "rb") as stream:
            magic = stream.read(4)
    except OSError as err:
        raise _data_loss(path, f"{type(err).__name__}: {err}") from err
    if magic not in _ZIP_MAGIC:
        raise _data_loss(path, "not an .npz file (a zip archive)")


def _data_loss(path, reason):
    return errors.DataLossError(None, None, f"Checkpoint {path} is truncated or corrupt: "
                                f"{reason}")


def _read_header(npz, path):
    if _HEADER not in npz.files or _HEADER_SUM not in npz.files:
        raise _data_loss(path, "no towerflow checkpoint header")
    raw = npz[_HEADER].tobytes()
    if hashlib.sha256(raw).hexdigest() != npz[_HEADER_SUM].tobytes().decode("ascii"):
        raise _data_loss(path, "the header does not match its SHA-256")
    header = json.loads(raw.decode("utf-8"))
    if header.get("format") != FORMAT:
        raise _data_loss(path, f"format {header.get('format')!r}, not {FORMAT!r}")
    if header["version"] > VERSION:
        raise errors.UnimplementedError(
            None, None, f"Checkpoint {path} has format version {header['version']}; this "
            f"towerflow reads versions up to {VERSION}")
    return header


def _read_entry(npz, meta, path, name):
    array = npz[meta["key"]]
    if meta["dtype"] == "bfloat16" and array.dtype == np.uint16:
        array = array.view(ml_dtypes.bfloat16)
    if _dtype_name(array) != meta["dtype"] or list(array.shape) != meta["shape"] \
            or _sha256(array) != meta["sha256"]:
        raise _data_loss(path, f"entry '{name}' does not match its SHA-256")
    return array


def _encode_extra_state(extra_state):
    """``(JSON-ready state, {key: array})``: arrays become references to entries."""
    if extra_state is None:
        return None, {}
    if not isinstance(extra_state, dict):
        raise TypeError(f"extra_state must be a dict; got {type(extra_state).__name__}")
    arrays = {}

    def encode(value, where):
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                raise TypeError(f"{where}: object arrays cannot be saved")
            arrays[f"x{len(arrays)}"] = value
            return {_ARRAY_REF: f"x{len(arrays) - 1}"}
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, dict):
            if not all(isinstance(key, str) for key in value):
                raise TypeError(f"{where}: dict keys must be strings; got {list(value)}")
            return {key: encode(item, f"{where}[{key!r}]") for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [encode(item, f"{where}[{i}]") for i, item in enumerate(value)]
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        raise TypeError(f"{where} is a {type(value).__name__}: extra_state holds only "
                        "dicts, lists, numbers, strings, None and NumPy arrays")
    return encode(extra_state, "extra_state"), arrays


def _decode_extra_state(value, arrays):
    if isinstance(value, dict):
        if set(value) == {_ARRAY_REF}:
            return arrays[value[_ARRAY_REF]]
        return {key: _decode_extra_state(item, arrays) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode_extra_state(item, arrays) for item in value]
    return value


def _atomic_write(path, write, kind):
    """Run ``write(stream)`` into a hidden temporary file next to ``path``, fsync
    it and rename it over ``path``: readers see the old file or the new one.
    ``kind`` ('checkpoint' or 'state') names the write's fault points."""
    directory, base = os.path.split(os.path.abspath(path))
    temporary = os.path.join(directory, f".{base}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        fault_point(f"{kind}-temporary")
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise
    _fsync_directory(directory)
    fault_point(f"{kind}-renamed")


def fault_point(point):
    """SIGKILL this process if the test hook KILL_AT_ENV asks for ``point`` now."""
    wanted = os.environ.get(KILL_AT_ENV)
    if not wanted or wanted.partition("@")[0] != point:
        return
    _points_reached[point] += 1
    if _points_reached[point] == int(wanted.partition("@")[2] or 1):
        os.kill(os.getpid(), signal.SIGKILL)


_TEMPORARY = re.compile(r"\..+\.tmp-(\d+)-[0-9a-f]+")


def remove_stale_temporaries(directory):
    """Remove the temporary files of writes whose process is gone (a run killed
    while it wrote a checkpoint or the state file); a live process's are left.
    Returns the names removed."""
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for name in sorted(os.listdir(directory)):
            match = _TEMPORARY.fullmatch(name)
            if match and not process_alive(int(match.group(1))):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(directory, name))
                    removed.append(name)
    return removed


def process_alive(pid):
    """Whether a process ``pid`` lives on this host (another user's counts; a
    zombie, ended but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:         # another user's live process
        return True
    return not _zombie(pid)


def _zombie(pid):
    # NOTE: a killed run whose parent died too (mpiexec, under a killed towerflow
    # launch) waits for init to reap it: seconds in a container, or for ever
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):   # no /proc (not Linux), or gone meanwhile
        return False


def _fsync_directory(directory):
    """Make the rename itself durable (POSIX); a no-op where unsupported."""
    with contextlib.suppress(OSError, AttributeError):
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


# -- the state file ('checkpoint') and finding checkpoints -------------------------------

CheckpointState = collections.namedtuple(
    "CheckpointState", ["model_checkpoint_path", "all_model_checkpoint_paths",
                        "all_model_checkpoint_timestamps"])


def update_checkpoint_state(save_dir, model_checkpoint_path, all_model_checkpoint_paths,
                            all_model_checkpoint_timestamps=(), latest_filename=None):
    """Write the state file of ``save_dir`` atomically, in TF's text format:
    ``model_checkpoint_path: "model-300"`` then one
    ``all_model_checkpoint_paths:`` line per kept checkpoint (oldest first)."""
    def relative(path):
        return os.path.relpath(path, save_dir) if os.path.dirname(
            os.path.abspath(path)) == os.path.abspath(save_dir) else os.path.abspath(path)
    lines = [f"model_checkpoint_path: {json.dumps(relative(model_checkpoint_path))}"]
    lines += [f"all_model_checkpoint_paths: {json.dumps(relative(path))}"
              for path in all_model_checkpoint_paths]
    lines += [f"all_model_checkpoint_timestamps: {stamp!r}"
              for stamp in all_model_checkpoint_timestamps]
    text = "\n".join(lines) + "\n"
    state_path = os.path.join(save_dir, latest_filename or STATE_FILENAME)
    _atomic_write(state_path, lambda stream: stream.write(text.encode("utf-8")), "state")


def get_checkpoint_state(checkpoint_dir, latest_filename=None):
    """The ``CheckpointState`` of ``checkpoint_dir`` (paths joined with it), or
    None when it has no state file. Example:
    ``tf.train.get_checkpoint_state('ckpt').all_model_checkpoint_paths``."""
    state_path = os.path.join(checkpoint_dir, latest_filename or STATE_FILENAME)
    try:
        with open(state_path, encoding="utf-8") as stream:
            text = stream.read()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as err:
        raise errors.DataLossError(None, None, f"Checkpoint state file {state_path} is not "
                                   f"UTF-8 text: {err}") from err
    fields = collections.defaultdict(list)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = re.fullmatch(r"\s*(\w+)\s*:\s*(.+?)\s*", line)
        try:
            fields[match.group(1)].append(json.loads(match.group(2)))
        except (AttributeError, ValueError) as err:
            raise errors.DataLossError(None, None, f"Checkpoint state file {state_path}, "
                                       f"line {number}: cannot parse {line!r}") from err
    paths = [os.path.join(checkpoint_dir, path) for path in fields["all_model_checkpoint_paths"]]
    latest = fields["model_checkpoint_path"]
    return CheckpointState(os.path.join(checkpoint_dir, latest[-1]) if latest else None,
                           paths, fields["all_model_checkpoint_timestamps"])


def _candidates(checkpoint_dir, latest_filename=None):
    """The listed checkpoints, newest first (the latest, then the others)."""
    state = get_checkpoint_state(checkpoint_dir, latest_filename)
    if state is None:
        return []
    ordered = [state.model_checkpoint_path] if state.model_checkpoint_path else []
    ordered += reversed(state.all_model_checkpoint_paths)
    return list(dict.fromkeys(ordered))


def latest_checkpoint(checkpoint_dir, latest_filename=None):
    """The prefix (TensorFlow's name, ``'ckpt/model-300'``) of the newest
    checkpoint in ``checkpoint_dir`` that verifies (every checksum), or None; a
    corrupt or missing newer one is skipped with a warning. Example: ``saver.restore(sess, tf.train.latest_checkpoint('ckpt'))``."""
    for path in _candidates(checkpoint_dir, latest_filename):
        try:
            return checkpoint_prefix(read_checkpoint(path).path)
        except (errors.DataLossError, errors.NotFoundError) as err:
            _skip_warning(path, err)
    return None
