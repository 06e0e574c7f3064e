"""``tf.train.MonitoredTrainingSession`` and ``MonitoredSession`` (TF 1.15's
monitored_session.py): a session that initialises or restores the variables,
runs hooks around every ``run``, and on close lets the hooks finish (the
final checkpoint among them)::

    with tf.train.MonitoredTrainingSession(checkpoint_dir='ckpt',
                                           hooks=[tf.train.StopAtStepHook(1000)]) as sess:
        while not sess.should_stop():
            sess.run(train_op)

``OutOfRangeError`` (an input pipeline at its end) or ``StopIteration``
raised inside the ``with`` block ends it quietly, as in TF. Not kept from TF:
the graph is not finalized, a non-chief does not wait for a chief (there is
no parameter server: it initialises its own variables), and errors are not
recovered by recreating the session.
"""

from .. import errors
from ..graph import core
from ..graph.core import GraphKeys
from .tf_logging import _logger as logger  # tf.logging: quiet below WARN, as TF1
from ..ops import array_ops, state_ops
from ..session import Session
from ..train.coordinator import Coordinator
from ..train.queue_runner import start_queue_runners
from ..train.saver import Saver
from . import basic_session_run_hooks as hooks_module
from . import summary
from .session_run_hook import SessionRunArgs, SessionRunContext, SessionRunValues

USE_DEFAULT = object()


def default_saver():
    """The graph's Saver (collection tf.GraphKeys.SAVERS), made if missing."""
    graph = core.get_default_graph()
    savers = graph.get_collection(GraphKeys.SAVERS)
    if len(savers) > 1:
        raise RuntimeError(f"More than one item in collection {GraphKeys.SAVERS}. Please "
                           "indicate which one to use by passing it to the constructor.")
    if savers:
        return savers[0]
    saver = Saver(allow_empty=True)
    graph.add_to_collection(GraphKeys.SAVERS, saver)
    return saver


def _default_local_init_op(graph):
    """TF's default: the local variables' initializer, grouped with every
    lookup table's initializer (None when there is neither)."""
    local = graph.get_collection(GraphKeys.LOCAL_VARIABLES)
    local_init = state_ops.variables_initializer(local) if local else None
    tables = graph.get_collection(GraphKeys.TABLE_INITIALIZERS)
    if not tables:
        return local_init
    return array_ops.group(*([local_init] if local_init is not None else []), *tables)


class Scaffold:
    """What a MonitoredSession builds its session from: ``init_op`` (default:
    every global variable's initializer), ``init_feed_dict``, ``init_fn(scaffold,
    session)``, ``local_init_op`` (default: the local variables' and lookup
    tables' initializers), ``summary_op`` (default: tf.summary.merge_all())
    and ``saver`` (default: the graph's, or a new Saver). ``ready_op`` and
    ``ready_for_local_init_op`` are accepted and unused.

    Example: ``tf.train.Scaffold(saver=tf.train.Saver(max_to_keep=2))``.
    """

    def __init__(self, init_op=None, init_feed_dict=None, init_fn=None, ready_op=None,
                 ready_for_local_init_op=None, local_init_op=None, summary_op=None,
                 saver=None, copy_from_scaffold=None):
        if copy_from_scaffold is not None:
            init_op = init_op or copy_from_scaffold.init_op
            init_feed_dict = init_feed_dict or copy_from_scaffold.init_feed_dict
            init_fn = init_fn or copy_from_scaffold._user_init_fn
            local_init_op = local_init_op or copy_from_scaffold.local_init_op
            summary_op = summary_op or copy_from_scaffold.summary_op
            saver = saver or copy_from_scaffold.saver
        self._init_op, self._init_feed_dict = init_op, init_feed_dict
        self._user_init_fn = init_fn
        self._init_fn = None if init_fn is None else (lambda sess: init_fn(self, sess))
        self._local_init_op, self._summary_op, self._saver = local_init_op, summary_op, saver
        self.ready_op, self.ready_for_local_init_op = ready_op, ready_for_local_init_op

    def finalize(self):
        """Make the defaults that were not given (in the default graph)."""
        if self._init_op is None:
            self._init_op = state_ops.global_variables_initializer()
        if self._local_init_op is None:
            self._local_init_op = _default_local_init_op(core.get_default_graph())
        if self._summary_op is None:
            self._summary_op = Scaffold.get_or_default("summary_op", GraphKeys.SUMMARY_OP,
                                                       summary.merge_all)
        if self._saver is None:
            self._saver = default_saver()
        return self

    @staticmethod
    def get_or_default(arg_name, collection_key, default_constructor):
        """The one item of ``collection_key``, else ``default_constructor()`` (kept there)."""
        graph = core.get_default_graph()
        elements = graph.get_collection(collection_key)
        if len(elements) > 1:
            raise RuntimeError(f'More than one item in the collection "{collection_key}". '
                               "Please indicate which one to use by passing it to the "
                               f"tf.Scaffold constructor as: tf.Scaffold({arg_name}=item "
                               "to use)")
        if elements:
            return elements[0]
        made = default_constructor()
        if made is not None:
            graph.add_to_collection(collection_key, made)
        return made

    init_op = property(lambda self: self._init_op)
    init_feed_dict = property(lambda self: self._init_feed_dict)
    init_fn = property(lambda self: self._init_fn)
    local_init_op = property(lambda self: self._local_init_op)
    summary_op = property(lambda self: self._summary_op)
    saver = property(lambda self: self._saver)


class ChiefSessionCreator:
    """Makes the chief's session: restores ``checkpoint_filename_with_path``,
    else the newest checkpoint of ``checkpoint_dir``, else runs the scaffold's
    init op and init_fn; then its local init op.

    Example: ``tf.train.ChiefSessionCreator(checkpoint_dir='ckpt')``.
    """

    def __init__(self, scaffold=None, master="", config=None, checkpoint_dir=None,
                 checkpoint_filename_with_path=None):
        self._scaffold = scaffold or Scaffold()
        self._master, self._config = master, config
        self._checkpoint_dir = checkpoint_dir
        self._checkpoint_path = checkpoint_filename_with_path

    def create_session(self):
        self._scaffold.finalize()
        sess = Session(self._master, graph=core.get_default_graph(), config=self._config)
        if not self._restore(sess):
            _initialise(sess, self._scaffold)
        if self._scaffold.local_init_op is not None:
            sess.run(self._scaffold.local_init_op)
        return sess

    def _restore(self, sess):
        saver = self._scaffold.saver
        if self._checkpoint_path:
            logger.info("Restoring parameters from %s", self._checkpoint_path)
            saver.restore(sess, self._checkpoint_path)
            return True
        if not self._checkpoint_dir:
            return False
        restored = saver.restore_latest(sess, self._checkpoint_dir)
        if restored.path is not None:
            logger.info("Restoring parameters from %s", restored.path)
        return restored.path is not None


class WorkerSessionCreator(ChiefSessionCreator):
    """A non-chief's session: initialised from the scaffold, never restored
    (no parameter server holds the chief's values for it to wait on)."""

    def __init__(self, scaffold=None, master="", config=None, max_wait_secs=30 * 60):
        super().__init__(scaffold, master, config)


def _initialise(sess, scaffold):
    sess.run(scaffold.init_op, feed_dict=scaffold.init_feed_dict)
    if scaffold.init_fn is not None:
        scaffold.init_fn(sess)


class MonitoredSession:
    """A Session with hooks: ``run`` adds every hook's fetches and feeds to the
    caller's and gives each hook its results; ``should_stop()`` turns True once
    a hook asks. As in TF, the graph's queue runners start with the session,
    under a Coordinator whose stop also stops the session. Closing runs the
    hooks' ``end`` (unless an error ended the block), stops and joins the
    queue runners, and closes the session.

    Example::

        with tf.train.MonitoredSession(hooks=[tf.train.StopAtStepHook(10)]) as sess:
            while not sess.should_stop():
                sess.run(train_op)
    """

    def __init__(self, session_creator=None, hooks=None, stop_grace_period_secs=120):
        self._hooks = list(hooks or [])
        for hook in self._hooks:
            hook.begin()
        self._sess = (session_creator or ChiefSessionCreator()).create_session()
        self._coord = Coordinator()
        self._threads = start_queue_runners(self._sess, self._coord)
        self._grace_secs = stop_grace_period_secs
        for hook in self._hooks:
            hook.after_create_session(self._sess, self._coord)
        self._stop_requested = False

    @property
    def graph(self):
        return self._sess.graph if self._sess is not None else None

    def should_stop(self):
        return self._sess is None or self._stop_requested or self._coord.should_stop()

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """``fetches``' values, after running every hook's before_run and after_run."""
        if self._sess is None:
            raise RuntimeError("Session is already closed.")
        if self._stop_requested:
            raise RuntimeError("Run called even after should_stop requested.")
        context = SessionRunContext(SessionRunArgs(fetches, feed_dict), self._sess)
        all_fetches = {"caller": fetches}
        feed_dict = self._hook_feeds(context, all_fetches, feed_dict)
        extra = {} if options is None else {"options": options}
        if run_metadata is not None:
            extra["run_metadata"] = run_metadata
        outputs = self._sess.run(all_fetches, feed_dict=feed_dict, **extra)
        for hook in self._hooks:
            hook.after_run(context, SessionRunValues(outputs.get(hook), options, run_metadata))
        self._stop_requested = self._stop_requested or context.stop_requested
        return outputs["caller"]

    def _hook_feeds(self, context, all_fetches, user_feeds):
        """Collect the hooks' fetches (into ``all_fetches``) and feeds."""
        hook_feeds = {}
        for hook in self._hooks:
            request = hook.before_run(context)
            if request is None:
                continue
            if request.fetches is not None:
                all_fetches[hook] = request.fetches
            if request.feed_dict:
                _refuse_overlap(hook_feeds, request.feed_dict, "Same tensor is fed by two hooks.")
                hook_feeds.update(request.feed_dict)
        if not hook_feeds:
            return user_feeds
        if user_feeds:
            _refuse_overlap(user_feeds, hook_feeds,
                            "Same tensor is fed by a SessionRunHook and user.")
            hook_feeds.update(user_feeds)
        return hook_feeds

    def close(self):
        self._close(error=False)

    def _close(self, error):
        if self._sess is None:
            return
        try:
            if not error:
                for hook in self._hooks:
                    hook.end(self._sess)
        finally:
            try:
                self._coord.request_stop()      # the runners close their queues
                self._coord.join(self._threads, stop_grace_period_secs=self._grace_secs,
                                 ignore_live_threads=True)
            finally:
                self._sess.close()
                self._sess = None

    def __enter__(self):
        if self._sess is None:
            raise RuntimeError("Session is already closed.")
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        # NOTE: the end of the input (OutOfRangeError, StopIteration) ends the
        # loop cleanly: the hooks still end (a final checkpoint), as in TF.
        quiet_end = exc_type is None or issubclass(exc_type, (errors.OutOfRangeError,
                                                              StopIteration))
        self._close(error=not quiet_end)
        return quiet_end


def _refuse_overlap(feeds, more_feeds, message):
    overlap = set(feeds) & set(more_feeds)
    if overlap:
        raise RuntimeError(f"{message} Conflict(s): {sorted(map(str, overlap))}")


def MonitoredTrainingSession(master="", is_chief=True, checkpoint_dir=None,
                             scaffold=None, hooks=None, chief_only_hooks=None,
                             save_checkpoint_secs=USE_DEFAULT,
                             save_summaries_steps=USE_DEFAULT,
                             save_summaries_secs=USE_DEFAULT, config=None,
                             stop_grace_period_secs=120, log_step_count_steps=100,
                             max_wait_secs=7200, save_checkpoint_steps=USE_DEFAULT,
                             summary_dir=None):
    """A MonitoredSession for training, as TF 1.15 makes it. On the chief:
    restores the newest checkpoint of ``checkpoint_dir`` (else initialises),
    and adds a StepCounterHook and a SummarySaverHook (every summary, every
    ``save_summaries_steps``=100 steps unless ``save_summaries_secs`` is
    given) writing to ``summary_dir`` (default ``checkpoint_dir``), and a
    CheckpointSaverHook (every ``save_checkpoint_secs``=600 s unless
    ``save_checkpoint_steps`` is given), then ``chief_only_hooks`` and
    ``hooks``. A non-chief gets ``hooks`` only.

    Example::

        with tf.train.MonitoredTrainingSession(checkpoint_dir='ckpt',
                                               save_checkpoint_steps=500) as sess:
            while not sess.should_stop():
                sess.run(train_op)
    """
    summaries_steps, summaries_secs = _defaults(save_summaries_steps, save_summaries_secs,
                                                (100, None))
    checkpoint_steps, checkpoint_secs = _defaults(save_checkpoint_steps, save_checkpoint_secs,
                                                  (None, 600))
    scaffold = scaffold or Scaffold()
    if not is_chief:
        creator = WorkerSessionCreator(scaffold, master, config, max_wait_secs)
        return MonitoredSession(creator, hooks or [], stop_grace_period_secs)
    all_hooks = list(chief_only_hooks or [])
    summary_dir = summary_dir or checkpoint_dir
    if summary_dir:
        if log_step_count_steps and log_step_count_steps > 0:
            all_hooks.append(hooks_module.StepCounterHook(
                output_dir=summary_dir, every_n_steps=log_step_count_steps))
        if (summaries_steps or 0) > 0 or (summaries_secs or 0) > 0:
            all_hooks.append(hooks_module.SummarySaverHook(
                scaffold=scaffold, save_steps=summaries_steps, save_secs=summaries_secs,
                output_dir=summary_dir))
    if checkpoint_dir and ((checkpoint_secs or 0) > 0 or (checkpoint_steps or 0) > 0):
        all_hooks.append(hooks_module.CheckpointSaverHook(
            checkpoint_dir, save_steps=checkpoint_steps, save_secs=checkpoint_secs,
            scaffold=scaffold))
    all_hooks.extend(hooks or [])
    creator = ChiefSessionCreator(scaffold, master, config, checkpoint_dir)
    return MonitoredSession(creator, all_hooks, stop_grace_period_secs)


def _defaults(steps, secs, defaults):
    """TF's rule for a (steps, secs) pair: neither given -> ``defaults``; one
    given -> the other off (None)."""
    if steps is USE_DEFAULT and secs is USE_DEFAULT:
        return defaults
    return (None if steps is USE_DEFAULT else steps), (None if secs is USE_DEFAULT else secs)
