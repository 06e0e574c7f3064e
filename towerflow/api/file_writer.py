"""``tf.summary.FileWriter``: TensorBoard event files, written by TensorBoard's
own writer (``tensorboard.summary.writer.event_file_writer``).

NOTE: the writer is the ``tensorboard`` package's, not tensorboardX's: its
``flush()`` waits until every queued event is on disk, as TF's FileWriter
promises; tensorboardX 2.6's ``flush()`` only flushes the file, so events
still in its queue are missing when the file is read right after.

::

    writer = tf.summary.FileWriter('logs', sess.graph)   # the graph tab
    writer.add_summary(sess.run(merged), global_step=step)
    writer.close()
"""

import threading
import time
from typing import ClassVar

from tensorboard.compat.proto import (
    event_pb2,
    graph_pb2,
    summary_pb2,
)

from ..graph.core import Graph


class FileWriter:
    """Writes ``Summary`` values, the graph and session logs to an event file in
    ``logdir`` (made if missing), queued and written by a background thread:
    at most ``max_queue`` events wait, and they reach the disk every
    ``flush_secs`` seconds, on ``flush()`` and on ``close()``. ``graph`` (or
    ``graph_def``) is written at once, as ``add_graph`` does.

    Example::

        with tf.summary.FileWriter('logs', sess.graph) as writer:
            writer.add_summary(summary_bytes, global_step=10)
    """

    def __init__(self, logdir, graph=None, max_queue=10, flush_secs=120, graph_def=None,
                 filename_suffix=None, session=None):
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
        if session is not None:
            raise NotImplementedError("FileWriter(session=...) writes through a TF2 summary "
                                      "resource, which towerflow does not have; pass logdir")
        self._logdir = str(logdir)
        self._options = (max_queue, flush_secs, filename_suffix or "")
        self._writer = EventFileWriter(self._logdir, *self._options)
        self._seen_summary_tags = set()
        self._session_run_tags = set()
        self._closed = False
        if graph is not None or graph_def is not None:
            self.add_graph(graph, graph_def=graph_def)

    def get_logdir(self):
        """The directory the event file is in."""
        return self._logdir

    def add_summary(self, summary, global_step=None):
        """Write ``summary``: the bytes a summary op returns, or a ``tf.Summary``.
        As TF does, a tag's metadata is written with its first value only."""
        if isinstance(summary, bytes):
            summary = summary_pb2.Summary.FromString(summary)
        elif not isinstance(summary, summary_pb2.Summary):
            raise TypeError(f"add_summary takes a Summary protocol buffer or the bytes a "
                            f"summary op returns; got {type(summary).__name__}")
        else:
            summary = _copy(summary)
        for value in summary.value:
            if not value.HasField("metadata"):
                continue
            if value.tag in self._seen_summary_tags:
                value.ClearField("metadata")
            else:
                self._seen_summary_tags.add(value.tag)
        self._add_event(event_pb2.Event(summary=summary), global_step)

    def add_session_log(self, session_log, global_step=None):
        """Write a ``tf.SessionLog`` (START, STOP or CHECKPOINT) at ``global_step``."""
        self._add_event(event_pb2.Event(session_log=session_log), global_step)

    def add_graph(self, graph, global_step=None, graph_def=None):
        """Write ``graph`` (a tf.Graph; or ``graph_def``, a GraphDef) for
        TensorBoard's graph tab: every op's name, type, inputs, requested
        device and output shapes."""
        if graph is not None and graph_def is not None:
            raise ValueError("Please pass only graph, or graph_def (deprecated), but not both.")
        if isinstance(graph, Graph):
            graph_def = graph_def_of(graph)
        elif graph is not None:
            graph_def = graph
        if not isinstance(graph_def, graph_pb2.GraphDef):
            raise TypeError(f"add_graph takes a tf.Graph or a GraphDef; got "
                            f"{type(graph_def).__name__}")
        self._add_event(event_pb2.Event(graph_def=graph_def.SerializeToString()),
                        global_step)

    def add_run_metadata(self, run_metadata, tag, global_step=None):
        """Write a traced ``Session.run``'s ``tf.RunMetadata`` under ``tag``, for
        TensorBoard's graph tab (its compute time and memory per node).
        As TF does: a tag may be used once per writer (ValueError), and the
        metadata is stored serialized (TaggedRunMetadata)."""
        if tag in self._session_run_tags:
            raise ValueError("The provided tag was already used for this event type")
        self._session_run_tags.add(tag)
        tagged = event_pb2.TaggedRunMetadata(
            tag=tag, run_metadata=run_metadata.SerializeToString())
        self._add_event(event_pb2.Event(tagged_run_metadata=tagged), global_step)

    def add_event(self, event):
        """Write an ``Event`` protocol buffer as it is."""
        if not self._closed:
            self._writer.add_event(event)

    def _add_event(self, event, step):
        event.wall_time = time.time()
        if step is not None:
            event.step = int(step)
        self.add_event(event)

    def flush(self):
        """Wait until every event added so far is written to disk."""
        if not self._closed:
            self._writer.flush()

    def close(self):
        """Flush and close the file; later events are ignored (as in TF) until
        ``reopen()``, which starts a new file in the same directory."""
        if not self._closed:
            self._writer.close()
            self._closed = True

    def reopen(self):
        """After ``close()``: write further events to a new file in ``logdir``."""
        if self._closed:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
            self._writer = EventFileWriter(self._logdir, *self._options)
            self._closed = False

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def _copy(summary):
    """A copy, so that dropping repeated metadata leaves the caller's Summary as is."""
    duplicate = summary_pb2.Summary()
    duplicate.CopyFrom(summary)
    return duplicate


class FileWriterCache:
    """One FileWriter per directory, shared (what TF's hooks use).

    Example: ``tf.summary.FileWriterCache.get('logs').add_summary(s, 3)``.
    """

    _writers: ClassVar[dict] = {}
    _lock = threading.Lock()

    @staticmethod
    def get(logdir):
        """The FileWriter of ``logdir``, made on first use."""
        with FileWriterCache._lock:
            writer = FileWriterCache._writers.get(logdir)
            if writer is None:
                writer = FileWriterCache._writers[logdir] = FileWriter(logdir)
            return writer

    @staticmethod
    def clear():
        """Close and forget every cached writer."""
        with FileWriterCache._lock:
            for writer in FileWriterCache._writers.values():
                writer.close()
            FileWriterCache._writers.clear()


# -- the graph as a GraphDef ------------------------------------------------------------


def graph_def_of(graph):
    """``graph`` as a GraphDef protocol buffer, with each op's output shapes
    (``_output_shapes``) for TensorBoard.

    Example: ``[node.name for node in graph_def_of(g).node]``.
    """
    return graph.as_graph_def(add_shapes=True)
