"""Stage 8: training — optimizers, the global step, learning-rate schedules
(``tf.train``)::

    step = tf.train.get_or_create_global_step()
    lr = tf.train.exponential_decay(0.1, step, decay_steps=1000, decay_rate=0.9)
    train_op = tf.train.AdamOptimizer(lr).minimize(loss, global_step=step)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())   # slots included
        sess.run(train_op, feed_dict={x: batch})      # updates in place
"""

from .training_util import (create_global_step, get_global_step, get_or_create_global_step,
                          global_step)
from .optimizer import Optimizer
from .optimizers import (AdadeltaOptimizer, AdagradOptimizer, AdamOptimizer, AdamWOptimizer,
                         FtrlOptimizer, GradientDescentOptimizer, MomentumOptimizer,
                         RMSPropOptimizer)
from .schedules import (cosine_decay, exponential_decay, inverse_time_decay,
                        learning_rate_schedule, linear_warmup, natural_exp_decay, one_cycle,
                        piecewise_constant, polynomial_decay)
from .checkpoint_format import checkpoint_exists, get_checkpoint_state, latest_checkpoint
from .checkpoint_reader import (NewCheckpointReader, init_from_checkpoint, list_variables,
                                load_checkpoint, load_variable)
from .saver import Saver
from .moving_averages import ExponentialMovingAverage
from .coordinator import Coordinator
from .queue_runner import QueueRunner, add_queue_runner, start_queue_runners
from .input import (batch, input_producer, limit_epochs, range_input_producer, shuffle_batch,
                    slice_input_producer, string_input_producer)
# tf.train.Example and its parts (protocol buffers; towerflow/api/example_protos.py)
from ..api.example_protos import (BytesList, Example, Feature, FeatureList, FeatureLists,
                                  Features, FloatList, Int64List, SequenceExample)

# MonitoredTrainingSession and its hooks live with TF1's public namespaces
# (towerflow/api); imported last, as they build on the names above.
from ..api.session_run_hook import (SessionRunArgs, SessionRunContext, SessionRunHook,
                                    SessionRunValues)
from ..api.basic_session_run_hooks import (CheckpointSaverHook, CheckpointSaverListener,
                                           FeedFnHook, LoggingTensorHook,
                                           NanLossDuringTrainingError, NanTensorHook,
                                           SecondOrStepTimer, StepCounterHook,
                                           StopAtStepHook, SummarySaverHook)
from ..api.monitored_session import (ChiefSessionCreator, MonitoredSession,
                                     MonitoredTrainingSession, Scaffold, WorkerSessionCreator)
from ..api.file_writer import FileWriterCache as SummaryWriterCache
from ..api.graph_io import write_graph
from ..api.meta_graph import export_meta_graph, import_meta_graph
from tensorboard.compat.proto.saver_pb2 import SaverDef   # TF's proto (tf.train.SaverDef)

__all__ = ["AdadeltaOptimizer", "AdagradOptimizer", "AdamOptimizer", "AdamWOptimizer",
           "ExponentialMovingAverage", "GradientDescentOptimizer", "MomentumOptimizer",
           "Optimizer", "RMSPropOptimizer", "cosine_decay", "create_global_step",
           "exponential_decay", "get_global_step", "get_or_create_global_step",
           "global_step", "inverse_time_decay", "learning_rate_schedule", "linear_warmup",
           "natural_exp_decay", "one_cycle", "piecewise_constant", "polynomial_decay",
           "Saver", "checkpoint_exists", "get_checkpoint_state", "latest_checkpoint",
           "list_variables", "load_variable", "NewCheckpointReader", "load_checkpoint",
           "init_from_checkpoint", "Coordinator", "QueueRunner",
           "add_queue_runner", "start_queue_runners", "batch", "input_producer",
           "limit_epochs", "range_input_producer", "shuffle_batch",
           "string_input_producer", "slice_input_producer", "BytesList", "Example",
           "Feature", "FeatureList", "FeatureLists", "Features", "FloatList", "Int64List",
           "SequenceExample", "SessionRunArgs", "SessionRunContext",
           "SessionRunHook", "SessionRunValues", "CheckpointSaverHook",
           "CheckpointSaverListener", "FeedFnHook", "LoggingTensorHook",
           "NanLossDuringTrainingError", "NanTensorHook", "SecondOrStepTimer",
           "StepCounterHook", "StopAtStepHook", "SummarySaverHook", "ChiefSessionCreator",
           "MonitoredSession", "MonitoredTrainingSession", "Scaffold",
           "WorkerSessionCreator", "SummaryWriterCache", "write_graph",
           "export_meta_graph", "import_meta_graph", "SaverDef"]

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from ..api import missing as _missing

__getattr__ = _missing.module_getattr("tf.train")
