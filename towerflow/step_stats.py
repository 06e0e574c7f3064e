"""``tf.RunOptions``, ``tf.RunMetadata`` and the step stats a traced
``Session.run`` fills: TensorFlow's own protocol buffers (config.proto,
step_stats.proto), as the installed ``tensorboard`` ships them
(``tensorboard.compat.proto``), so they serialize as TensorFlow's do
(``FileWriter.add_run_metadata``) and ``str()`` prints protobuf's text
format::

    options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
    metadata = tf.RunMetadata()
    sess.run(train_op, options=options, run_metadata=metadata)
    for dev_stats in metadata.step_stats.dev_stats:
        for node in dev_stats.node_stats:
            print(dev_stats.device, node.node_name, node.all_end_rel_micros)
"""

from tensorboard.compat.proto import types_pb2
from tensorboard.compat.proto.allocation_description_pb2 import AllocationDescription
from tensorboard.compat.proto.config_pb2 import RunMetadata, RunOptions
from tensorboard.compat.proto.step_stats_pb2 import (
    DeviceStepStats,
    NodeExecStats,
    NodeOutput,
    StepStats,
)
from tensorboard.compat.proto.tensor_description_pb2 import TensorDescription
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

__all__ = ["AllocationDescription", "DeviceStepStats", "NodeExecStats", "NodeOutput",
           "RunMetadata", "RunOptions", "StepStats", "TensorDescription", "TensorShapeProto",
           "data_type", "shape_proto"]

# towerflow's dtype names -> TensorFlow's DataType enum names (types.proto).
_DATA_TYPE_NAMES = {"float32": "DT_FLOAT", "float64": "DT_DOUBLE", "int32": "DT_INT32",
                    "uint8": "DT_UINT8", "int16": "DT_INT16", "int8": "DT_INT8",
                    "string": "DT_STRING", "int64": "DT_INT64", "bool": "DT_BOOL",
                    "bfloat16": "DT_BFLOAT16", "uint16": "DT_UINT16", "float16": "DT_HALF"}


def data_type(dtype_name):
    """TensorFlow's DataType enum value of a towerflow dtype name
    (``data_type("float32") == 1``, DT_FLOAT); 0 (DT_INVALID) if it has none."""
    name = _DATA_TYPE_NAMES.get(dtype_name)
    return types_pb2.DataType.Value(name) if name else types_pb2.DT_INVALID


def shape_proto(shape):
    """A known ``shape`` (a tuple of ints) as a TensorShapeProto."""
    return TensorShapeProto(dim=[TensorShapeProto.Dim(size=int(size)) for size in shape])
