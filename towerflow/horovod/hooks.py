"""hvd.BroadcastGlobalVariablesHook: MonitoredTrainingSession's way to start
every rank from the same variables."""

from ..api.session_run_hook import SessionRunHook
from ..graph import core
from .collectives import broadcast_global_variables


class BroadcastGlobalVariablesHook(SessionRunHook):
    """Once the session has initialised (or restored) the variables, sets every
    global variable to its value on ``root_rank``.

    Example::

        hooks = [hvd.BroadcastGlobalVariablesHook(0),
                 tf.train.StopAtStepHook(last_step=1000 // hvd.size())]
        with tf.train.MonitoredTrainingSession(hooks=hooks) as sess: ...
    """

    def __init__(self, root_rank, device=""):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.bcast_op = None

    def begin(self):
        graph = core.get_default_graph()
        if self.bcast_op is None or self.bcast_op.graph is not graph:
            with graph.device(self.device):
                self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)
