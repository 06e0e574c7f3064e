"""Checkpoints (``tf.train.Saver``): device-independent, atomic and verified.

::

    saver = tf.train.Saver(max_to_keep=3)       # every global variable
    path, state = saver.restore_latest(sess, "ckpt")   # (None, {}) on a fresh start
    if path is None:
        sess.run(tf.global_variables_initializer())
    ...
    saver.save(sess, "ckpt/model", global_step=step, extra_state={"epoch": 3})
    # -> 'ckpt/model-1200' (TF's prefix; the file is 'ckpt/model-1200.npz', and
    # the graph, for tf.train.import_meta_graph, 'ckpt/model-1200.meta');
    # 'ckpt/checkpoint' lists the kept ones

A variable is saved under its *logical* name: a leading ``tower_<i>/`` is
stripped, only the lowest tower's copy (tower 0, the source of the mirror) is
written, and a restore gives the value to every replica whose logical name
matches. So a run saved with 4 towers resumes with 1 or 3, and a one-device
checkpoint restores into towers.

One checkpoint is one ``.npz`` file (NumPy's zip of ``.npy`` arrays, read with
``allow_pickle=False``): entries ``v0, v1, ...`` hold the variables, ``x0,
...`` the arrays of ``extra_state``, ``__header__`` a UTF-8 JSON header (format,
version, global step, per entry its logical name, dtype, shape and SHA-256, and
the JSON part of ``extra_state``) and ``__header_sha256__`` the header's
SHA-256. Files are written to a hidden temporary file in the same directory,
fsynced and renamed (``os.replace``), so a crash never leaves a partial file
under a checkpoint's name; every checksum is verified before any variable is
assigned. The ``checkpoint`` state file uses TensorFlow's text format.
"""

import collections
import os
import re
import time

import numpy as np
from tensorboard.compat.proto import saver_pb2

from .. import errors
from ..graph import core
from ..graph.core import GraphKeys
from ..log import logger
from ..ops import constant_ops, state_ops
from .checkpoint_format import (
    _TOWER_PREFIX,
    _candidates,
    _encode_extra_state,
    _skip_warning,
    checkpoint_exists,
    checkpoint_file,
    checkpoint_prefix,
    get_checkpoint_state,
    logical_name,
    read_checkpoint,
    remove_checkpoint,
    update_checkpoint_state,
    write_bundle,
    write_checkpoint,
)

# What ``Saver.restore_latest`` returns: the checkpoint restored (None when the
# directory holds none) and its extra_state ({} when none).
Restored = collections.namedtuple("Restored", ["path", "extra_state"])
FORMATS = ("npz", "tf")     # towerflow's one-file format; TensorFlow's V2 (tensor bundle)


def _tower_index(name):
    match = _TOWER_PREFIX.match(name)
    return int(match.group(1)) if match else -1


class Saver:
    """Saves and restores variables; see the module docstring.

    ``var_list``: None (every global variable: model variables, optimizer slots,
    Adam's beta powers, the global step), a list of Variables (saved under their
    logical names; every replica of each is restored), or a dict ``{name:
    Variable}`` (saved under exactly those names). ``max_to_keep``: how many
    recent checkpoints to keep (None or 0: keep all files; only the newest is
    listed in the state file); ``keep_checkpoint_every_n_hours``: also keep one
    file per this many hours. ``format``: ``'npz'`` (the default: towerflow's
    one-file format, which also holds ``extra_state``) or ``'tf'``: TensorFlow's
    own V2 format (``<prefix>.index`` and ``<prefix>.data-00000-of-00001``), which
    TensorFlow's Saver restores. ``restore`` reads either, whatever ``format``.
    ``saver_def``: TF's SaverDef of a Saver whose ops the graph holds (an
    imported meta graph's), names under the scope ``name``; the Saver is
    rebuilt from them and adds no op.
    Example: ``tf.train.Saver(max_to_keep=3, format='tf')``.
    """

    def __init__(self, var_list=None, max_to_keep=5, keep_checkpoint_every_n_hours=10000.0,
                 name=None, defer_build=False, allow_empty=False, pad_step_number=False,
                 *, format="npz", saver_def=None):
        if format not in FORMATS:
            raise ValueError(f"Saver format must be one of {FORMATS}; got {format!r}")
        if saver_def is not None and not isinstance(saver_def, saver_pb2.SaverDef):
            raise TypeError(f"saver_def must be a SaverDef proto; got {saver_def!r}")
        self._format = format
        self._var_list = var_list
        self._given_saver_def = saver_def
        if saver_def is not None:
            max_to_keep = saver_def.max_to_keep
            keep_checkpoint_every_n_hours = saver_def.keep_checkpoint_every_n_hours or 10000.0
        self._max_to_keep = max_to_keep
        self._keep_every_s = float(keep_checkpoint_every_n_hours) * 3600.0
        self._next_preserve_time = time.time() + self._keep_every_s
        self._name = name if saver_def is not None else name or "save"
        self._allow_empty = allow_empty
        self._pad_step_number = pad_step_number
        self._last_checkpoints = []     # [(path, time saved)], oldest first
        self._meta_graph_cache = None   # (graph's signature, serialised MetaGraphDef)
        self._graph = None
        if not defer_build:
            self.build()

    # -- building --------------------------------------------------------------------

    def build(self):
        """Collect the variables and build the restore ops (placeholders and
        Assigns); done by the constructor unless ``defer_build=True``."""
        if self._graph is not None:
            return
        if self._given_saver_def is not None:
            self._build_from_saver_def(core.get_default_graph())
            return
        graph = _graph_of(self._var_list)
        self._sources, self._targets = _saved_variables(graph, self._var_list)
        if not self._sources and not self._allow_empty:
            raise ValueError("No variables to save")
        self._graph = graph
        self._feeds, self._restore_op = self._restore_ops(graph)

    def _restore_ops(self, graph):
        feeds, assigns = {}, []
        with graph.as_default(), graph.control_dependencies(None), \
                graph.name_scope(None), graph.name_scope(self._name):
            with graph.device(None), graph.device("/cpu:0"):   # TF's filename tensor
                self._filename_tensor = constant_ops.constant("model", name="Const")
            for name in sorted(self._sources):
                source = self._sources[name]
                with graph.device(None), graph.device("/cpu:0"):
                    feeds[name] = constant_ops.placeholder(source.dtype, source.shape,
                                                           name="value")
                assigns += [state_ops.assign(target, feeds[name], name="Assign").op
                            for target in self._targets[name]]
            # The restore op also describes the Saver, so that an imported meta
            # graph rebuilds it from its SaverDef: the checkpoint names, in the
            # order of the feeds, and the format.
            attrs = {"_checkpoint_names": tuple(sorted(self._sources)),
                     "_checkpoint_format": self._format}
            with graph.device(None), graph.control_dependencies(assigns):
                restore_op = graph.create_op("NoOp", [], attrs, name="restore_all")
        return feeds, restore_op

    def _build_from_saver_def(self, graph):
        """The Saver whose ops ``saver_def`` names (under the scope ``name``)."""
        saver_def = _scoped_saver_def(self._given_saver_def, self._name)
        restore_op = graph.get_operation_by_name(saver_def.restore_op_name)
        if "_checkpoint_names" not in restore_op.attrs:
            raise ValueError(f"The restore op {restore_op.name} of this SaverDef was not "
                             "built by towerflow's Saver: it cannot be rebuilt")
        names = list(restore_op.attrs["_checkpoint_names"])
        self._format = restore_op.attrs["_checkpoint_format"]
        self._filename_tensor = graph.get_tensor_by_name(saver_def.filename_tensor_name)
        self._feeds, self._targets = _restore_feeds_and_targets(graph, restore_op, names)
        self._sources = {name: _source_of(name, group) for name, group in
                         self._targets.items()}
        self._graph, self._restore_op = graph, restore_op

    @property
    def saver_def(self):
        """This Saver as TF's SaverDef: the names of its filename tensor (also
        ``save_tensor_name``: towerflow saves from Python, with no save op) and
        of its restore op, and how many checkpoints it keeps."""
        self.build()
        return saver_pb2.SaverDef(
            filename_tensor_name=self._filename_tensor.name,
            save_tensor_name=self._filename_tensor.name,
            restore_op_name=self._restore_op.name, max_to_keep=self._max_to_keep or 0,
            keep_checkpoint_every_n_hours=self._keep_every_s / 3600.0,
            version=saver_pb2.SaverDef.V2)

    def as_saver_def(self):
        """``saver.saver_def``."""
        return self.saver_def

    def export_meta_graph(self, filename=None, collection_list=None, as_text=False,
                          export_scope=None, clear_devices=False,
                          clear_extraneous_savers=False, strip_default_attrs=False,
                          save_debug_info=False):
        """The MetaGraphDef of this Saver's graph, with its SaverDef, written to
        ``filename`` when given (see ``tf.train.export_meta_graph``).
        Example: ``saver.export_meta_graph('model.meta')``."""
        from ..api.meta_graph import export_meta_graph
        self.build()
        return export_meta_graph(
            filename=filename, graph_def=self._graph.as_graph_def(add_shapes=True),
            saver_def=self.saver_def, collection_list=collection_list, as_text=as_text,
            graph=self._graph, export_scope=export_scope, clear_devices=clear_devices,
            strip_default_attrs=strip_default_attrs)

    # -- saving ----------------------------------------------------------------------

    @property
    def last_checkpoints(self):
        """The paths of the kept checkpoints, oldest first."""
        return [path for path, _ in self._last_checkpoints]

    def save(self, sess, save_path, global_step=None, latest_filename=None,
             meta_graph_suffix="meta", write_meta_graph=True, write_state=True,
             strip_default_attrs=False, save_debug_info=False, *, extra_state=None):
        """Write one checkpoint file and return its prefix, as TensorFlow does:
        ``save_path`` or ``save_path-<step>`` with ``global_step`` (an int, or a
        variable or tensor that is evaluated); the file is the prefix plus
        ``.npz``, and ``restore`` takes either (with ``format='tf'``: the files
        ``<prefix>.index`` and ``<prefix>.data-00000-of-00001``). ``extra_state``:
        a JSON-serialisable dict (NumPy arrays allowed anywhere in it) returned by
        ``restore``; the npz format only.
        ``write_meta_graph``: also write the graph as a MetaGraphDef to
        ``<prefix>.<meta_graph_suffix>`` (``tf.train.import_meta_graph`` rebuilds it).
        Example: ``saver.save(sess, 'ckpt/model', global_step=step)``."""
        self.build()
        step = _step_value(sess, global_step)
        path = _checkpoint_path(save_path, step, self._pad_step_number, self._format)
        if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise errors.NotFoundError(None, None, f"Parent directory of {save_path} "
                                       "doesn't exist, can't save.")
        if extra_state is not None and self._format == "tf":
            raise ValueError("extra_state is saved in towerflow's npz format only; this "
                             "Saver writes TF's format (format='tf')")
        json_state, extra_arrays = _encode_extra_state(extra_state)
        names = sorted(self._sources)
        values = dict(zip(names, _run(sess, self._graph,
                                      [self._sources[name] for name in names])))
        if self._format == "tf":
            write_bundle(path, values)
        else:
            write_checkpoint(path, values, step, json_state, extra_arrays)
        prefix = checkpoint_prefix(path)
        if write_meta_graph:
            self._write_meta_graph(meta_graph_filename(prefix, meta_graph_suffix),
                                   strip_default_attrs)
        if write_state:
            self._record(prefix, latest_filename, meta_graph_suffix)
        return prefix

    def _write_meta_graph(self, path, strip_default_attrs):
        """Write the meta graph, serialised once while the graph keeps its ops
        and collections (a training loop saves the same graph again and again)."""
        from ..api.graph_io import write_atomically
        # NOTE: ops are only ever added, so their count (and the collections'
        # sizes) tells whether the graph changed since the last save.
        key = (len(self._graph.get_operations()), strip_default_attrs,
               tuple((name, len(items)) for name, items in self._graph._collections.items()))
        if self._meta_graph_cache is None or self._meta_graph_cache[0] != key:
            meta_graph_def = self.export_meta_graph(strip_default_attrs=strip_default_attrs)
            self._meta_graph_cache = key, meta_graph_def.SerializeToString(deterministic=True)
        write_atomically(path, self._meta_graph_cache[1])

    def _record(self, path, latest_filename, meta_graph_suffix="meta"):
        """Add the checkpoint ``path`` (a prefix) to the kept list, write the
        state file, then delete the checkpoints that fell out of it, with their
        meta graphs (so the state never lists a deleted file)."""
        self._last_checkpoints = [(p, t) for p, t in self._last_checkpoints if p != path]
        self._last_checkpoints.append((path, time.time()))
        keep = self._max_to_keep or 1   # None or 0: list only the newest, delete nothing
        dropped = self._last_checkpoints[:-keep] if self._max_to_keep else []
        self._last_checkpoints = self._last_checkpoints[-keep:]
        directory = os.path.dirname(os.path.abspath(path))
        update_checkpoint_state(directory, path, self.last_checkpoints,
                                [t for _, t in self._last_checkpoints], latest_filename)
        for old_path, saved_at in dropped:
            if saved_at > self._next_preserve_time:
                self._next_preserve_time += self._keep_every_s   # kept for good
            else:
                _remove(old_path, meta_graph_suffix)

    def recover_last_checkpoints(self, checkpoint_paths):
        """Track ``checkpoint_paths`` (oldest first) as this saver's kept
        checkpoints, so a resumed run goes on deleting the old ones."""
        self._last_checkpoints = [(path, _saved_time(path)) for path in checkpoint_paths]

    # -- restoring -------------------------------------------------------------------

    def restore(self, sess, save_path):
        """Set every variable (all replicas of each) from ``save_path`` and return
        its ``extra_state`` ({} if none). Every checksum is verified first:
        DataLossError for a truncated or corrupt file, NotFoundError for a missing
        file or variable, InvalidArgumentError for a shape or dtype mismatch.
        Example: ``state = saver.restore(sess, tf.train.latest_checkpoint('ckpt'))``."""
        if save_path is None:
            raise ValueError("Can't load save_path when it is None.")
        self.build()
        checkpoint = read_checkpoint(save_path)
        feed_dict = {self._feeds[name]: value
                     for name, value in _matched_values(self, checkpoint)}
        _run(sess, self._graph, self._restore_op, feed_dict)
        return checkpoint.extra_state

    def restore_latest(self, sess, checkpoint_dir, latest_filename=None):
        """Restore the newest good checkpoint listed in ``checkpoint_dir``; a
        corrupt newer one is skipped with a warning. Returns ``Restored(prefix,
        extra_state)``; ``(None, {})`` when the directory lists no checkpoint;
        DataLossError when every listed one is corrupt. Also tracks the listed
        files, so ``max_to_keep`` keeps working across restarts. Example:
        ``path, state = saver.restore_latest(sess, 'ckpt')``."""
        candidates = _candidates(checkpoint_dir, latest_filename)
        failures = []
        for path in candidates:
            try:
                extra_state = self.restore(sess, path)
            except (errors.DataLossError, errors.NotFoundError) as err:
                if isinstance(err, errors.NotFoundError) and checkpoint_exists(path):
                    raise   # the file is fine; this graph wants a variable it lacks
                failures.append(_skip_warning(path, err))
                continue
            self.recover_last_checkpoints(
                [p for p in get_checkpoint_state(checkpoint_dir, latest_filename)
                 .all_model_checkpoint_paths if checkpoint_exists(p)])
            return Restored(checkpoint_prefix(path), extra_state)
        if failures:
            raise errors.DataLossError(None, None, "No usable checkpoint in "
                                       f"{checkpoint_dir}: " + "; ".join(failures))
        return Restored(None, {})

    def restore_state(self, save_path):
        """The ``extra_state`` saved in ``save_path`` (verified), without a Session."""
        return read_checkpoint(save_path, with_variables=False).extra_state


def meta_graph_filename(checkpoint_prefix, meta_graph_suffix="meta"):
    """TF's name of a checkpoint's meta graph: 'ckpt/model-100' -> 'ckpt/model-100.meta'."""
    base = re.sub(r"-[\d\?]+-of-\d+$", "", checkpoint_prefix)
    return f"{base}.{meta_graph_suffix}"


def _scoped_saver_def(saver_def, scope):
    """``saver_def`` with its names under ``scope`` (TF's use of Saver's name)."""
    scoped = saver_pb2.SaverDef()
    scoped.CopyFrom(saver_def)
    if scope:
        from ..api.meta_graph import prepend_name_scope
        for field in ("filename_tensor_name", "save_tensor_name", "restore_op_name"):
            setattr(scoped, field, prepend_name_scope(getattr(saver_def, field), scope))
    return scoped


def _restore_feeds_and_targets(graph, restore_op, names):
    """``({name: feed placeholder}, {name: [variables]})`` of a Saver's restore
    op: its Assigns in the order of ``names``, each name's feed once."""
    variables = _variables_by_op(graph)
    feeds, targets = {}, collections.defaultdict(list)
    for assign in restore_op.control_inputs:
        placeholder = assign.inputs[0]
        if placeholder not in feeds.values():
            feeds[names[len(feeds)]] = placeholder
        name = next(key for key, feed in feeds.items() if feed is placeholder)
        variable_op = assign.attrs["variable"]
        targets[name].append(variables.get(variable_op) or state_ops.Variable._from_ops(
            variable_op, None, variable_op.outputs[0], None, False))
    return feeds, dict(targets)


def _variables_by_op(graph):
    from ..api.meta_graph import VARIABLE_COLLECTIONS
    return {var.op: var for key in VARIABLE_COLLECTIONS for var in graph.get_collection(key)
            if isinstance(var, state_ops.Variable)}


def _graph_of(var_list):
    """The graph of the variables of ``var_list`` (the default graph for None)."""
    if var_list is None:
        return core.get_default_graph()
    variables = list(var_list.values() if isinstance(var_list, dict) else var_list)
    graphs = {id(_check_variable(var).graph): var.graph for var in variables}
    if len(graphs) > 1:
        raise ValueError("var_list holds variables of several graphs: "
                         f"{[var.op.name for var in variables]}")
    return next(iter(graphs.values()), core.get_default_graph())


def _saved_variables(graph, var_list):
    """``({logical name: variable saved}, {logical name: [variables restored]})``."""
    if isinstance(var_list, dict):
        return dict(var_list), {name: [var] for name, var in var_list.items()}
    if var_list is None:
        var_list = graph.get_collection(GraphKeys.GLOBAL_VARIABLES)
    wanted = {logical_name(var.op.name) for var in var_list}
    every = list(var_list) + graph.get_collection(GraphKeys.GLOBAL_VARIABLES)
    targets = collections.defaultdict(list)
    for var in every:
        name = logical_name(var.op.name)
        if name in wanted and all(var is not other for other in targets[name]):
            targets[name].append(var)
    return {name: _source_of(name, group) for name, group in targets.items()}, dict(targets)


def _source_of(name, group):
    """The copy to save: the lowest tower's (a variable outside towers counts as
    the source); two sources of one logical name are ambiguous."""
    group = sorted(group, key=lambda var: _tower_index(var.op.name))
    sources = [var for var in group if _tower_index(var.op.name) <= 0]
    if len(sources) > 1:
        raise ValueError(f"Variables {[var.op.name for var in sources]} all map to the "
                         f"checkpoint name '{name}'; rename one, or pass var_list as a dict")
    for var in group[1:]:
        if var.dtype is not group[0].dtype or not var.shape.is_compatible_with(group[0].shape):
            raise ValueError(f"Replicas of '{name}' differ: {group[0].op.name} is "
                             f"{group[0].dtype.name} {group[0].shape}, {var.op.name} is "
                             f"{var.dtype.name} {var.shape}")
    return group[0]


def _check_variable(var):
    if not isinstance(var, state_ops.Variable):
        raise TypeError(f"Saver saves tf.Variable objects; got {var!r}")
    return var


def _matched_values(saver, checkpoint):
    """``(logical name, array)`` for every variable of ``saver``, checked against
    the checkpoint: all missing names, then all mismatches, in one error."""
    missing = sorted(set(saver._sources) - set(checkpoint.variables))
    if missing:
        raise errors.NotFoundError(None, None, f"Key(s) {', '.join(missing)} not found in "
                                   f"checkpoint {checkpoint.path}")
    problems = [_mismatch(name, saver._sources[name], checkpoint.variables[name])
                for name in sorted(saver._sources)]
    problems = [problem for problem in problems if problem]
    if problems:
        raise errors.InvalidArgumentError(None, None, f"Cannot restore from checkpoint "
                                          f"{checkpoint.path}: " + "; ".join(problems))
    return [(name, checkpoint.variables[name]) for name in sorted(saver._sources)]


def _mismatch(name, var, value):
    expected = np.dtype(var.dtype.as_numpy_dtype)
    if value.dtype != expected:
        return (f"variable '{name}' is {expected.name} in the graph but {value.dtype.name} "
                "in the checkpoint")
    if not var.shape.is_compatible_with(value.shape):
        return (f"variable '{name}' has shape {var.shape} in the graph but "
                f"{tuple(value.shape)} in the checkpoint")
    return None


def _run(sess, graph, fetches, feed_dict=None):
    if sess.graph is not graph:
        raise ValueError("The Session runs another graph than the one this Saver was "
                         "built in; build the Saver after the model, in the same graph")
    return sess.run(fetches, feed_dict=feed_dict)


def _step_value(sess, global_step):
    if global_step is None:
        return None
    if isinstance(global_step, (state_ops.Variable, core.Tensor)):
        global_step = sess.run(global_step)
    return int(global_step)


def _checkpoint_path(save_path, step, pad, checkpoint_format):
    """The npz file's path, or the prefix of a checkpoint in TF's format."""
    base = save_path.removesuffix(".npz")
    if step is not None:
        base += f"-{step:08d}" if pad else f"-{step}"
    return base + ".npz" if checkpoint_format == "npz" else base


def _saved_time(checkpoint):
    path = checkpoint_file(checkpoint)
    return os.path.getmtime(path) if path is not None else time.time()


def _remove(prefix, meta_graph_suffix):
    try:
        remove_checkpoint(checkpoint_prefix(prefix))
        meta_graph = meta_graph_filename(checkpoint_prefix(prefix), meta_graph_suffix)
        if os.path.exists(meta_graph):
            os.remove(meta_graph)
    except OSError as err:
        logger.warning("towerflow: could not delete old checkpoint %s: %s", prefix, err)
