"""``tf.train.Example`` and its parts: protocol buffer messages with the
package, names and field numbers of TensorFlow's
tensorflow/core/example/feature.proto and example.proto, so a record written
here parses in TensorFlow and the other way round::

    example = tf.train.Example(features=tf.train.Features(feature={
        'label': tf.train.Feature(int64_list=tf.train.Int64List(value=[3])),
        'image': tf.train.Feature(bytes_list=tf.train.BytesList(value=[png])),
    }))
    record = example.SerializeToString()

NOTE: no installed package ships these two files (tensorboard ships many of
TF's protos, not these), so their descriptors are built here and kept in a
private pool: a process that also imports TensorFlow keeps its own.
"""

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_FIELD = descriptor_pb2.FieldDescriptorProto
_OPTIONAL, _REPEATED = _FIELD.LABEL_OPTIONAL, _FIELD.LABEL_REPEATED


def _field(name, number, kind, label=_OPTIONAL, type_name=None, packed=False, oneof=None):
    field = _FIELD(name=name, number=number, type=kind, label=label, json_name=_camel(name))
    if type_name:
        field.type_name = type_name
    if packed:
        field.options.packed = True
    if oneof is not None:
        field.oneof_index = oneof
    return field


def _camel(name):
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _message(name, *fields, nested=(), oneofs=()):
    message = descriptor_pb2.DescriptorProto(name=name, field=list(fields),
                                             nested_type=list(nested))
    for oneof in oneofs:
        message.oneof_decl.add(name=oneof)
    return message


def _map_entry(name, value_type):
    """The nested message protoc makes for ``map<string, value_type>``."""
    entry = _message(name, _field("key", 1, _FIELD.TYPE_STRING),
                     _field("value", 2, _FIELD.TYPE_MESSAGE, type_name=value_type))
    entry.options.map_entry = True
    return entry


def _feature_file():
    message = _FIELD.TYPE_MESSAGE
    return descriptor_pb2.FileDescriptorProto(
        name="tensorflow/core/example/feature.proto", package="tensorflow", syntax="proto3",
        message_type=[
            _message("BytesList", _field("value", 1, _FIELD.TYPE_BYTES, _REPEATED)),
            _message("FloatList", _field("value", 1, _FIELD.TYPE_FLOAT, _REPEATED,
                                         packed=True)),
            _message("Int64List", _field("value", 1, _FIELD.TYPE_INT64, _REPEATED,
                                         packed=True)),
            _message("Feature",
                     _field("bytes_list", 1, message, type_name=".tensorflow.BytesList",
                            oneof=0),
                     _field("float_list", 2, message, type_name=".tensorflow.FloatList",
                            oneof=0),
                     _field("int64_list", 3, message, type_name=".tensorflow.Int64List",
                            oneof=0),
                     oneofs=["kind"]),
            _message("Features", _field("feature", 1, message, _REPEATED,
                                        ".tensorflow.Features.FeatureEntry"),
                     nested=[_map_entry("FeatureEntry", ".tensorflow.Feature")]),
            _message("FeatureList", _field("feature", 1, message, _REPEATED,
                                           ".tensorflow.Feature")),
            _message("FeatureLists", _field("feature_list", 1, message, _REPEATED,
                                            ".tensorflow.FeatureLists.FeatureListEntry"),
                     nested=[_map_entry("FeatureListEntry", ".tensorflow.FeatureList")]),
        ])


def _example_file():
    message = _FIELD.TYPE_MESSAGE
    return descriptor_pb2.FileDescriptorProto(
        name="tensorflow/core/example/example.proto", package="tensorflow", syntax="proto3",
        dependency=["tensorflow/core/example/feature.proto"],
        message_type=[
            _message("Example", _field("features", 1, message,
                                       type_name=".tensorflow.Features")),
            _message("SequenceExample",
                     _field("context", 1, message, type_name=".tensorflow.Features"),
                     _field("feature_lists", 2, message,
                            type_name=".tensorflow.FeatureLists")),
        ])


def _message_class(pool, full_name):
    descriptor = pool.FindMessageTypeByName(full_name)
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)   # protobuf < 4.21


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_feature_file())
_POOL.Add(_example_file())

BytesList = _message_class(_POOL, "tensorflow.BytesList")
FloatList = _message_class(_POOL, "tensorflow.FloatList")
Int64List = _message_class(_POOL, "tensorflow.Int64List")
Feature = _message_class(_POOL, "tensorflow.Feature")
Features = _message_class(_POOL, "tensorflow.Features")
FeatureList = _message_class(_POOL, "tensorflow.FeatureList")
FeatureLists = _message_class(_POOL, "tensorflow.FeatureLists")
Example = _message_class(_POOL, "tensorflow.Example")
SequenceExample = _message_class(_POOL, "tensorflow.SequenceExample")

__all__ = ["BytesList", "Example", "Feature", "FeatureList", "FeatureLists", "Features",
           "FloatList", "Int64List", "SequenceExample"]
