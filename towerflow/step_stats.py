"""``tf.RunOptions``, ``tf.RunMetadata`` and the step stats a traced
``Session.run`` fills, with the field names of TensorFlow 1.15's protos
(config.proto, step_stats.proto) as plain objects; ``str()`` prints them in
protobuf's text format::

    options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
    metadata = tf.RunMetadata()
    sess.run(train_op, options=options, run_metadata=metadata)
    for dev_stats in metadata.step_stats.dev_stats:
        for node in dev_stats.node_stats:
            print(dev_stats.device, node.node_name, node.all_end_rel_micros)
"""

from typing import ClassVar

# TensorFlow's DataType enum values (types.proto), for TensorDescription.dtype.
DATA_TYPES = {"float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int16": 5, "int8": 6,
              "string": 7, "int64": 9, "bool": 10, "bfloat16": 14, "uint16": 17,
              "float16": 19}
_DATA_TYPE_NAMES = {1: "DT_FLOAT", 2: "DT_DOUBLE", 3: "DT_INT32", 4: "DT_UINT8",
                    5: "DT_INT16", 6: "DT_INT8", 7: "DT_STRING", 9: "DT_INT64",
                    10: "DT_BOOL", 14: "DT_BFLOAT16", 17: "DT_UINT16", 19: "DT_HALF"}


class _Message:
    """A protobuf-like record: keyword construction of its fields only, and
    ``str()`` in text format (fields at their defaults left out)."""

    _FIELDS = ()        # (name, default factory), in the proto's order
    _ENUMS: ClassVar[dict] = {}         # field name -> {value: name}

    def __init__(self, **fields):
        for name, default in self._FIELDS:
            object.__setattr__(self, name, default())
        for name, value in fields.items():
            if name not in self._field_names():
                raise ValueError(f'Protocol message {type(self).__name__} has no "{name}" '
                                 "field.")
            setattr(self, name, value)

    @classmethod
    def _field_names(cls):
        return [name for name, _ in cls._FIELDS]

    def __setattr__(self, name, value):
        if name not in self._field_names():
            raise AttributeError(f'Assignment not allowed (no field "{name}" in protocol '
                                 f"message {type(self).__name__} object).")
        object.__setattr__(self, name, value)

    def __eq__(self, other):
        return type(self) is type(other) and all(
            getattr(self, name) == getattr(other, name) for name in self._field_names())

    __hash__ = None

    def __str__(self):
        return "".join(self._text_lines(""))

    def __repr__(self):
        return f"<{type(self).__name__}>\n{self}"

    def _text_lines(self, indent):
        for name, default in self._FIELDS:
            value = getattr(self, name)
            values = value if isinstance(value, list) else [value]
            if not isinstance(value, list) and value == default():
                continue
            for item in values:
                yield from _field_text(name, item, indent, self._ENUMS.get(name))


def _field_text(name, value, indent, enum):
    if isinstance(value, _Message):
        yield f"{indent}{name} {{\n"
        yield from value._text_lines(indent + "  ")
        yield f"{indent}}}\n"
    elif enum is not None:
        yield f"{indent}{name}: {enum.get(value, value)}\n"
    elif isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        yield f'{indent}{name}: "{escaped}"\n'
    elif isinstance(value, bool):
        yield f"{indent}{name}: {'true' if value else 'false'}\n"
    else:
        yield f"{indent}{name}: {value}\n"


class RunOptions(_Message):
    """Options of one ``Session.run``. ``trace_level`` other than NO_TRACE,
    with a ``run_metadata``, traces the run; ``timeout_in_ms`` bounds how long
    a blocking op (a queue's) may wait in the run; the other fields TF
    programs set (``output_partition_graphs``, ...) are accepted and change
    nothing.

    Example::

        >>> tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE).trace_level
        3
    """

    NO_TRACE, SOFTWARE_TRACE, HARDWARE_TRACE, FULL_TRACE = 0, 1, 2, 3
    _FIELDS = (("trace_level", int), ("timeout_in_ms", int), ("inter_op_thread_pool", int),
               ("output_partition_graphs", bool), ("debug_options", lambda: None),
               ("report_tensor_allocations_upon_oom", bool), ("experimental", lambda: None))
    _ENUMS: ClassVar[dict] = {"trace_level": {0: "NO_TRACE", 1: "SOFTWARE_TRACE", 2: "HARDWARE_TRACE",
                              3: "FULL_TRACE"}}


class Dim(_Message):
    _FIELDS = (("size", int), ("name", str))


class TensorShapeProto(_Message):
    _FIELDS = (("dim", list), ("unknown_rank", bool))

    @classmethod
    def of(cls, shape):
        return cls(dim=[Dim(size=int(size)) for size in shape])


class AllocationDescription(_Message):
    _FIELDS = (("requested_bytes", int), ("allocated_bytes", int), ("allocator_name", str),
               ("allocation_id", int), ("has_single_reference", bool), ("ptr", int))


class TensorDescription(_Message):
    """An output's dtype (TF's DataType enum: 1 is DT_FLOAT), shape and bytes."""

    _FIELDS = (("dtype", int), ("shape", TensorShapeProto),
               ("allocation_description", AllocationDescription))
    _ENUMS: ClassVar[dict] = {"dtype": _DATA_TYPE_NAMES}


class NodeOutput(_Message):
    _FIELDS = (("slot", int), ("tensor_description", TensorDescription))


class NodeExecStats(_Message):
    """One op's (or copy's) execution: times in microseconds, the start since
    the epoch, the rest relative to it; ``thread_id`` is the Timeline's lane."""

    _FIELDS = (("node_name", str), ("all_start_micros", int), ("op_start_rel_micros", int),
               ("op_end_rel_micros", int), ("all_end_rel_micros", int), ("memory", list),
               ("output", list), ("timeline_label", str), ("scheduled_micros", int),
               ("thread_id", int))


class DeviceStepStats(_Message):
    _FIELDS = (("device", str), ("node_stats", list))


class StepStats(_Message):
    _FIELDS = (("dev_stats", list),)


class RunMetadata(_Message):
    """What a ``Session.run`` given ``run_metadata=`` reports: ``step_stats``
    when traced (each traced run replaces it, as TensorFlow's does).

    Example::

        >>> metadata = tf.RunMetadata(); len(metadata.step_stats.dev_stats)
        0
    """

    _FIELDS = (("step_stats", StepStats), ("cost_graph", lambda: None),
               ("partition_graphs", list), ("function_graphs", list))
