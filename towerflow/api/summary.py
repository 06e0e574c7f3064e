"""``tf.summary``: summaries for TensorBoard, as in TensorFlow 1.15::

    tf.summary.scalar('loss', loss)
    tf.summary.histogram('weights', w)
    merged = tf.summary.merge_all()
    writer = tf.summary.FileWriter('logs', sess.graph)
    summary, _ = sess.run([merged, train_op])
    writer.add_summary(summary, step)      # bytes, or a tf.Summary
    writer.close()                         # then: tensorboard --logdir logs

A summary op's value is a serialized ``Summary`` protocol buffer (a scalar
``tf.string``: ``sess.run`` returns bytes). Its tag is its op's name: the
name given, inside the enclosing name scopes, made unique (``loss``,
``loss_1``, ``tower_0/loss``); ``family=`` prefixes it once more. The ops run
on the CPU (see towerflow/ops/summary_ops.py); the files are written by
TensorBoard's own writer (see towerflow/api/file_writer.py).
"""

import contextlib
import re

from tensorboard.compat.proto.event_pb2 import Event, SessionLog, TaggedRunMetadata
from tensorboard.compat.proto.summary_pb2 import (
    Summary,
    SummaryDescription,
    SummaryMetadata,
)

from ..graph import core
from ..graph.core import GraphKeys
from ..log import logger
from ..ops import constant_ops
from ..ops.summary_ops import build_summary
from .file_writer import FileWriter, FileWriterCache

__all__ = [
    "Event",
    "FileWriter",
    "FileWriterCache",
    "SessionLog",
    "Summary",
    "SummaryDescription",
    "TaggedRunMetadata",
    "histogram",
    "image",
    "merge",
    "merge_all",
    "scalar",
    "tensor_summary",
    "text",
]

_INVALID_TAG_CHARACTERS = re.compile(r"[^-/\w\.]")


def _clean_tag(name):
    """``name`` with characters TensorBoard refuses replaced by '_' (TF's rule)."""
    if name is None:
        return None
    cleaned = _INVALID_TAG_CHARACTERS.sub("_", name).lstrip("/")
    if cleaned != name:
        logger.info("Summary name %s is illegal; using %s instead.", name, cleaned)
    return cleaned


@contextlib.contextmanager
def _summary_scope(name, family):
    """Yields (tag, op name) for a summary named ``name``: a unique name scope,
    the tag being the scope (after ``family/`` when a family is given)."""
    name, family = _clean_tag(name), _clean_tag(family)
    base = name if family is None else f"{family}/{name}"
    graph = core.get_default_graph()
    with graph.name_scope(base) as scope:
        tag = scope.rstrip("/")
        yield (tag if family is None else f"{family}/{tag}"), scope


def _collect(summary, collections):
    """Add ``summary`` to ``collections`` (default: tf.GraphKeys.SUMMARIES)."""
    graph = summary.graph
    for key in (collections if collections is not None else [GraphKeys.SUMMARIES]):
        graph.add_to_collection(key, summary)
    return summary


def scalar(name, tensor, collections=None, family=None):
    """A summary of one real number: ``tf.summary.scalar('loss', loss)``.

    ``tensor`` must hold one value (InvalidArgumentError at run time
    otherwise, as in TF); ``collections``: the collections it joins (default
    ``[tf.GraphKeys.SUMMARIES]``; ``[]`` for none). Returns a string tensor.
    """
    tensor = constant_ops.convert_to_tensor(tensor)
    with _summary_scope(name, family) as (tag, scope):
        return _collect(build_summary("ScalarSummary", [tensor], scope, tag=tag), collections)


def histogram(name, values, collections=None, family=None):
    """A histogram of ``values`` (any shape) in TF's default exponential
    buckets; NaN or infinite values are an InvalidArgumentError at run time.

    Example: ``tf.summary.histogram('weights', w)``.
    """
    values = constant_ops.convert_to_tensor(values)
    with _summary_scope(name, family) as (tag, scope):
        return _collect(build_summary("HistogramSummary", [values], scope, tag=tag),
                        collections)


def image(name, tensor, max_outputs=3, collections=None, family=None):
    """PNG images of the first ``max_outputs`` of a ``[batch, height, width,
    channels]`` batch (channels 1, 3 or 4). uint8 images are written as they
    are; float images are scaled per image as TF does (all values >= 0: times
    255 / max; else times 127 / max |value|, plus 128). Tags are
    ``name/image/0``, ``name/image/1``, ... (``name/image`` when
    ``max_outputs`` is 1).

    Example: ``tf.summary.image('inputs', images, max_outputs=4)``.
    """
    tensor = constant_ops.convert_to_tensor(tensor)
    if isinstance(max_outputs, bool) or not isinstance(max_outputs, int) or max_outputs < 1:
        raise ValueError(f"max_outputs must be a whole number >= 1, got {max_outputs!r}")
    with _summary_scope(name, family) as (tag, scope):
        return _collect(build_summary("ImageSummary", [tensor], scope, tag=tag,
                                      max_images=max_outputs), collections)


def tensor_summary(name, tensor, summary_description=None, collections=None,
                   summary_metadata=None, family=None, display_name=None):
    """A summary holding ``tensor`` itself (TensorBoard's plugins read these).

    Example: ``tf.summary.tensor_summary('embedding', e)``.
    """
    tensor = constant_ops.convert_to_tensor(tensor)
    metadata = summary_metadata if summary_metadata is not None else SummaryMetadata()
    if summary_description is not None:
        metadata.summary_description = summary_description
    if display_name is not None:
        metadata.display_name = display_name
    with _summary_scope(name, family) as (tag, scope):
        return _collect(build_summary("TensorSummaryV2", [tensor], scope, tag=tag,
                                      serialized_metadata=metadata.SerializeToString()),
                        collections)


def text(name, tensor, collections=None):
    """A text summary of a ``tf.string`` tensor (TensorBoard's Text tab shows
    it, Markdown rendered); ValueError for any other dtype, as in TF.

    Example: ``tf.summary.text('notes', tf.constant('lr halved at step 300'))``.
    """
    tensor = constant_ops.convert_to_tensor(tensor)
    if tensor.dtype.name != "string":
        raise ValueError(f"Expected tensor {tensor.name} to have dtype string, got "
                         f"{tensor.dtype!r}")
    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))
    return tensor_summary(name, tensor, summary_metadata=metadata, collections=collections)


def merge(inputs, collections=None, name=None):
    """One summary with the values of every summary in ``inputs``; a tag that
    occurs twice is an InvalidArgumentError at run time, as in TF.

    Example: ``merged = tf.summary.merge([loss_summary, weights_summary])``.
    """
    inputs = [constant_ops.convert_to_tensor(summary) for summary in inputs]
    graph = core.get_default_graph()
    with graph.name_scope(name or "Merge"):
        merged = build_summary("MergeSummary", inputs, name or "MergeSummary")
    return _collect(merged, collections if collections is not None else [])


def merge_all(key=GraphKeys.SUMMARIES, scope=None, name=None):
    """Merge every summary of collection ``key`` (``scope``: only those whose
    name starts with it); None when there are none, as in TF.

    Example: ``merged = tf.summary.merge_all()``.
    """
    summaries = core.get_default_graph().get_collection(key, scope=scope)
    if not summaries:
        return None
    return merge(summaries, name=name)

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.summary")
