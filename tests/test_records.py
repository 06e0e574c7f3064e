"""TFRecord files, tf.train.Example, Example and CSV parsing, the text, TFRecord
and whole-file readers, and the PNG / JPEG codecs, as TF 1.15 programs use them.
The file bytes, CRCs and protocol-buffer wire format are checked against
encoders written here from the specifications, not against towerflow itself."""

import gzip
import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

import towerflow as tf

# -- independent references: CRC-32C bit by bit, protobuf wire-format decoding ----------


def reference_crc32c(data):
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), one bit at a time."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def reference_masked(data):
    crc = reference_crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def reference_tfrecord(records):
    out = b""
    for data in records:
        length = struct.pack("<Q", len(data))
        out += length + struct.pack("<I", reference_masked(length)) + data
        out += struct.pack("<I", reference_masked(data))
    return out


def wire_fields(data):
    """[(field number, wire type, value)] of one protobuf message's bytes."""
    fields, position = [], 0
    while position < len(data):
        key, position = varint(data, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, position = varint(data, position)
        elif wire_type == 2:
            size, position = varint(data, position)
            value, position = data[position:position + size], position + size
        elif wire_type == 5:
            value, position = data[position:position + 4], position + 4
        else:
            raise AssertionError(f"unexpected wire type {wire_type}")
        fields.append((number, wire_type, value))
    return fields


def varint(data, position):
    value, shift = 0, 0
    while True:
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position, shift = position + 1, shift + 7
        if not byte & 0x80:
            return value, position


def int64_feature(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def float_feature(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def bytes_feature(values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))


def example(**features):
    return tf.train.Example(features=tf.train.Features(feature=features))


# -- CRC and file format -----------------------------------------------------------------


def test_crc32c_matches_the_rfc_3720_vectors():
    from towerflow.backends.tfrecord_format import crc32c
    vectors = {bytes(32): 0x8A9136AA, b"\xff" * 32: 0x62A8AB43,
               bytes(range(32)): 0x46DD794E, bytes(range(31, -1, -1)): 0x113FDB5C,
               b"123456789": 0xE3069283}
    for data, expected in vectors.items():
        assert crc32c(data) == expected == reference_crc32c(data)


def test_tfrecord_writer_writes_the_bytes_of_the_format(tmp_path):
    records = [b"", b"a", b"hello tfrecords" * 20]
    path = tmp_path / "plain.tfrecord"
    with tf.python_io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    assert path.read_bytes() == reference_tfrecord(records)
    assert list(tf.python_io.tf_record_iterator(str(path))) == records
    assert list(tf.io.tf_record_iterator(str(path))) == records


@pytest.mark.parametrize("kind, unpack", [
    ("GZIP", gzip.decompress), ("ZLIB", zlib.decompress)])
def test_compressed_tfrecords_hold_the_plain_bytes(tmp_path, kind, unpack):
    records = [bytes([value]) * value for value in range(50)]
    path = str(tmp_path / f"{kind}.tfrecord")
    code = getattr(tf.python_io.TFRecordCompressionType, kind)
    options = tf.python_io.TFRecordOptions(code)
    with tf.io.TFRecordWriter(path, options) as writer:
        for record in records:
            writer.write(record)
    with open(path, "rb") as file:
        assert unpack(file.read()) == reference_tfrecord(records)
    assert list(tf.python_io.tf_record_iterator(path, options)) == records
    assert list(tf.python_io.tf_record_iterator(path, kind)) == records
    assert tf.python_io.TFRecordOptions.get_compression_type_string(options) == kind


def test_corrupted_and_truncated_records_raise_data_loss(tmp_path):
    good = reference_tfrecord([b"first", b"second"])
    damaged = bytearray(good)
    damaged[21 + 16 + 3] ^= 0xFF          # a byte of the second record's data
    path = tmp_path / "damaged.tfrecord"
    path.write_bytes(bytes(damaged))
    # As TF's RecordReader: a bad or cut data CRC names where the data starts
    # (the record's offset + 12), data missing entirely the record's offset.
    second_at = 16 + len(b"first")
    with pytest.raises(tf.errors.DataLossError,
                       match=f"^corrupted record at {second_at + 12}$"):
        list(tf.python_io.tf_record_iterator(str(path)))
    path.write_bytes(good[:-3])
    with pytest.raises(tf.errors.DataLossError,
                       match=f"^truncated record at {second_at + 12}$"):
        list(tf.python_io.tf_record_iterator(str(path)))
    path.write_bytes(good[:second_at + 12])
    with pytest.raises(tf.errors.DataLossError, match=f"^truncated record at {second_at}$"):
        list(tf.python_io.tf_record_iterator(str(path)))
    damaged_length = bytearray(good)
    damaged_length[second_at] ^= 1
    path.write_bytes(bytes(damaged_length))
    with pytest.raises(tf.errors.DataLossError, match=f"^corrupted record at {second_at}$"):
        list(tf.python_io.tf_record_iterator(str(path)))
    path.write_bytes(bytes(damaged))
    dataset = tf.data.TFRecordDataset(str(path))
    record = dataset.make_one_shot_iterator().get_next()
    with tf.Session() as sess:
        assert sess.run(record) == b"first"
        with pytest.raises(tf.errors.DataLossError, match="corrupted record at"):
            sess.run(record)


def test_missing_file_and_bad_compression_name():
    with pytest.raises(tf.errors.NotFoundError, match="no-such.tfrecord"):
        list(tf.python_io.tf_record_iterator("/nonexistent/no-such.tfrecord"))
    with pytest.raises(ValueError, match="'BZIP2'"):
        tf.python_io.TFRecordOptions("BZIP2")


# -- tf.train.Example --------------------------------------------------------------------


def test_example_serializes_with_tensorflows_field_numbers():
    message = example(label=int64_feature([7, 300]))
    (features_field,) = wire_fields(message.SerializeToString())
    assert features_field[:2] == (1, 2)                      # Example.features = 1
    (entry,) = wire_fields(features_field[2])                # Features.feature = 1 (map)
    assert entry[:2] == (1, 2)
    key, value = wire_fields(entry[2])
    assert key == (1, 2, b"label") and value[:2] == (2, 2)   # map key = 1, value = 2
    (int64_list,) = wire_fields(value[2])
    assert int64_list[:2] == (3, 2)                          # Feature.int64_list = 3
    (packed,) = wire_fields(int64_list[2])
    assert packed == (1, 2, b"\x07\xac\x02")                 # packed varints 7, 300
    floats = wire_fields(float_feature([1.5]).SerializeToString())
    assert floats == [(2, 2, b"\x0a\x04" + struct.pack("<f", 1.5))]  # float_list = 2, packed
    strings = wire_fields(bytes_feature([b"ab", b""]).SerializeToString())
    assert strings == [(1, 2, b"\x0a\x02ab\x0a\x00")]        # bytes_list = 1


def test_sequence_example_field_numbers():
    message = tf.train.SequenceExample(
        context=tf.train.Features(feature={"id": int64_feature([1])}),
        feature_lists=tf.train.FeatureLists(feature_list={
            "tokens": tf.train.FeatureList(feature=[int64_feature([4]), int64_feature([5])])}))
    context, lists = wire_fields(message.SerializeToString())
    assert (context[0], lists[0]) == (1, 2)
    (entry,) = wire_fields(lists[2])
    key, value = wire_fields(entry[2])
    assert key[2] == b"tokens"
    assert [field[0] for field in wire_fields(value[2])] == [1, 1]   # FeatureList.feature = 1
    assert tf.train.SequenceExample.FromString(message.SerializeToString()) == message


# -- parsing -------------------------------------------------------------------------------


FEATURES = {
    "pixels": tf.FixedLenFeature([2, 2], tf.float32),
    "label": tf.FixedLenFeature([], tf.int64),
    "weight": tf.FixedLenFeature([], tf.float32, default_value=0.5),
    "name": tf.FixedLenFeature([], tf.string, default_value="none"),
    "tags": tf.VarLenFeature(tf.string),
    "steps": tf.FixedLenSequenceFeature([2], tf.int64, allow_missing=True, default_value=-1),
}


def sample_records():
    rng = np.random.default_rng(4)
    pixels = rng.normal(size=(3, 2, 2)).astype(np.float32)
    rows = [example(pixels=float_feature(pixels[0].ravel()), label=int64_feature([3]),
                    name=bytes_feature([b"zero"]), tags=bytes_feature([b"a", b"b"]),
                    steps=int64_feature([1, 2, 3, 4])),
            example(pixels=float_feature(pixels[1].ravel()), label=int64_feature([-9]),
                    weight=float_feature([2.0])),
            example(pixels=float_feature(pixels[2].ravel()), label=int64_feature([2 ** 40]),
                    tags=bytes_feature([b"c"]), steps=int64_feature([5, 6]))]
    return [row.SerializeToString() for row in rows], pixels


def test_parse_single_example_fills_defaults_and_sparse_values():
    records, pixels = sample_records()
    serialized = tf.placeholder(tf.string, [])
    parsed = tf.parse_single_example(serialized, FEATURES)
    assert parsed["pixels"].shape.as_list() == [2, 2]
    assert parsed["steps"].shape.as_list() == [None, 2]
    with tf.Session() as sess:
        first = sess.run(parsed, {serialized: records[0]})
        second = sess.run(parsed, {serialized: records[1]})
    np.testing.assert_array_equal(first["pixels"], pixels[0])
    assert (first["label"], first["weight"], first["name"]) == (3, 0.5, b"zero")
    assert (second["label"], second["weight"], second["name"]) == (-9, 2.0, b"none")
    assert isinstance(parsed["tags"], tf.SparseTensor) and parsed["tags"].dtype == tf.string
    assert isinstance(first["tags"], tf.SparseTensorValue)
    np.testing.assert_array_equal(first["tags"].indices, [[0], [1]])
    assert list(first["tags"].values) == [b"a", b"b"] and list(first["tags"].dense_shape) == [2]
    np.testing.assert_array_equal(first["steps"], [[1, 2], [3, 4]])
    assert second["steps"].shape == (0, 2) and second["tags"].values.size == 0


def test_parse_example_batches_pads_and_stacks():
    records, pixels = sample_records()
    parsed = tf.io.parse_example(tf.constant(records), FEATURES)
    with tf.Session() as sess:
        got = sess.run(parsed)
    np.testing.assert_array_equal(got["pixels"], pixels)
    np.testing.assert_array_equal(got["label"], [3, -9, 2 ** 40])
    np.testing.assert_allclose(got["weight"], [0.5, 2.0, 0.5])
    np.testing.assert_array_equal(got["tags"].indices, [[0, 0], [0, 1], [2, 0]])
    np.testing.assert_array_equal(got["tags"].dense_shape, [3, 2])
    assert isinstance(got["tags"], tf.SparseTensorValue)
    np.testing.assert_array_equal(got["steps"], [[[1, 2], [3, 4]], [[-1, -1], [-1, -1]],
                                                 [[5, 6], [-1, -1]]])


def test_a_var_len_feature_is_a_sparse_tensor_that_densifies():
    """As TF 1.15: tf.sparse.to_dense and tf.sparse_tensor_to_dense take the
    parsed SparseTensor (one example: rank 1; a batch: rank 2, row-padded)."""
    records, _ = sample_records()
    features = {"tags": tf.VarLenFeature(tf.string), "ids": tf.VarLenFeature(tf.int64)}
    serialized = tf.placeholder(tf.string, [])
    single = tf.parse_single_example(serialized, features)
    batch = tf.parse_example(tf.constant(records), features)
    assert single["tags"].shape.as_list() == [None]
    assert batch["ids"].shape.as_list() == [None, None]
    tags = tf.sparse.to_dense(single["tags"], default_value="")
    batch_tags = tf.sparse_tensor_to_dense(batch["tags"], default_value="-")
    batch_ids = tf.sparse.to_dense(batch["ids"])
    with tf.Session() as sess:
        assert list(sess.run(tags, {serialized: records[0]})) == [b"a", b"b"]
        assert sess.run(tags, {serialized: records[1]}).shape == (0,)
        got_tags, got_ids = sess.run([batch_tags, batch_ids])
    np.testing.assert_array_equal(got_tags, np.array([[b"a", b"b"], [b"-", b"-"],
                                                      [b"c", b"-"]], dtype=object))
    assert got_ids.shape == (3, 0) and got_ids.dtype == np.int64


def test_var_len_features_parsed_in_map_batch_as_tf_does():
    """Dataset.map(parse_single_example) then batch: a SparseTensor of rank 2
    whose indices hold each element's position, dense_shape the widest row."""
    records, _ = sample_records()
    features = {"tags": tf.VarLenFeature(tf.string), "label": tf.FixedLenFeature([], tf.int64)}
    parsed = tf.data.Dataset.from_tensor_slices(records).map(
        lambda record: tf.parse_single_example(record, features))
    assert parsed.output_classes == {"tags": tf.SparseTensor, "label": tf.Tensor}
    assert parsed.output_types == {"tags": tf.string, "label": tf.int64}
    assert parsed.output_shapes["tags"].as_list() == [None]
    batched = parsed.batch(2)
    assert batched.output_shapes["tags"].as_list() == [None, None]
    element = batched.make_one_shot_iterator().get_next()
    assert isinstance(element["tags"], tf.SparseTensor)
    counts = parsed.map(lambda f: tf.shape(tf.sparse.to_dense(f["tags"], default_value=""))[0])
    count = counts.make_one_shot_iterator().get_next()
    with tf.Session() as sess:
        first, last = sess.run(element), sess.run(element)
        assert [sess.run(count) for _ in range(3)] == [2, 0, 1]
    np.testing.assert_array_equal(first["tags"].indices, [[0, 0], [0, 1]])
    assert list(first["tags"].values) == [b"a", b"b"]
    np.testing.assert_array_equal(first["tags"].dense_shape, [2, 2])
    np.testing.assert_array_equal(first["label"], [3, -9])
    np.testing.assert_array_equal(last["tags"].indices, [[0, 0]])
    np.testing.assert_array_equal(last["tags"].dense_shape, [1, 1])


@pytest.mark.parametrize("record, features, message", [
    (example(), {"label": tf.FixedLenFeature([], tf.int64)},
     r"^Feature: label \(data type: int64\) is required but could not be found\.$"),
    (example(label=float_feature([1.0])), {"label": tf.FixedLenFeature([], tf.int64)},
     r"^Key: label\.  Data types don't match\. Data type: float but expected type: int64$"),
    (example(x=float_feature([1.0, 2.0, 3.0])), {"x": tf.FixedLenFeature([2], tf.float32)},
     (r"^Key: x\.  Number of float values != expected\.  Values size: 3 but output shape: "
      r"\[2\]$")),
])
def test_parse_errors_carry_tensorflows_messages(record, features, message):
    parsed = tf.parse_single_example(tf.constant(record.SerializeToString()), features)
    with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError, match=message):
        sess.run(parsed)


def test_parse_example_errors_name_the_example_index():
    records = [example(label=int64_feature([1])), example()]
    parsed = tf.parse_example([r.SerializeToString() for r in records],
                              {"label": tf.FixedLenFeature([], tf.int64)})
    with tf.Session() as sess, pytest.raises(
            tf.errors.InvalidArgumentError,
            match=r"^Name: <unknown>, Feature: label \(data type: int64\) is required"):
        sess.run(parsed)
    with pytest.raises(ValueError, match="Missing: features was"):
        tf.parse_example(["x"], {})
    with pytest.raises(ValueError, match="Invalid feature label"):
        tf.parse_single_example("x", {"label": tf.int64})
    with pytest.raises(ValueError, match="need to be known"):
        tf.parse_single_example("x", {"label": tf.FixedLenFeature([None], tf.int64)})


# -- digits through TFRecords: tf.data and the queue readers -------------------------------


def digits_split():
    from sklearn.datasets import load_digits
    digits = load_digits()
    images = (digits.images * 15).astype(np.uint8)             # 0..16 -> 0..240
    order = np.random.default_rng(0).permutation(len(images))
    return images[order], digits.target[order].astype(np.int64)


def png_bytes(image):
    buffer = io.BytesIO()
    Image.fromarray(image, "L").save(buffer, format="PNG")
    return buffer.getvalue()


def write_digit_records(path, images, labels, options=None):
    with tf.python_io.TFRecordWriter(path, options) as writer:
        for image, label in zip(images, labels):
            writer.write(example(image=bytes_feature([png_bytes(image)]),
                                 label=int64_feature([label])).SerializeToString())


DIGIT_FEATURES = {"image": tf.FixedLenFeature([], tf.string),
                  "label": tf.FixedLenFeature([], tf.int64)}


def decode_digit(serialized):
    parsed = tf.parse_single_example(serialized, DIGIT_FEATURES)
    image = tf.image.decode_png(parsed["image"], channels=1)
    image = tf.reshape(tf.cast(image, tf.float32) / 240.0, [64])
    return image, parsed["label"]


def softmax_model(images, labels):
    weights = tf.Variable(tf.zeros([64, 10]))
    bias = tf.Variable(tf.zeros([10]))
    logits = tf.matmul(images, weights) + bias
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))
    return weights, bias, tf.train.GradientDescentOptimizer(0.5).minimize(loss)


def accuracy(weights, bias, images, labels):
    predictions = np.argmax(images.reshape(len(images), 64) / 240.0 @ weights + bias, axis=1)
    return np.mean(predictions == labels)


def test_digits_train_through_tfrecord_dataset(tmp_path):
    images, labels = digits_split()
    train_path = str(tmp_path / "train.tfrecord.gz")
    write_digit_records(train_path, images[:1400], labels[:1400], "GZIP")
    dataset = tf.data.TFRecordDataset([train_path], compression_type="GZIP")
    dataset = dataset.map(decode_digit).shuffle(500, seed=1).repeat(6).batch(50)
    batch_images, batch_labels = dataset.make_one_shot_iterator().get_next()
    weights, bias, train_op = softmax_model(batch_images, batch_labels)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        first_images = None
        while True:
            try:
                step_images, _ = sess.run([batch_images, train_op])
            except tf.errors.OutOfRangeError:
                break
            first_images = step_images if first_images is None else first_images
        final_weights, final_bias = sess.run([weights, bias])
    # What went in comes out: each decoded row is one of the written images.
    written = {row.tobytes() for row in images[:1400].reshape(-1, 64)}
    decoded = np.rint(first_images * 240).astype(np.uint8)
    assert all(row.tobytes() in written for row in decoded)
    assert accuracy(final_weights, final_bias, images[1400:], labels[1400:]) > 0.9


def test_digits_train_through_tfrecord_reader_and_shuffle_batch(tmp_path):
    images, labels = digits_split()
    paths = [str(tmp_path / f"train-{part}.tfrecord") for part in range(2)]
    write_digit_records(paths[0], images[:700], labels[:700])
    write_digit_records(paths[1], images[700:1400], labels[700:1400])
    files = tf.train.string_input_producer(paths, num_epochs=5, seed=2)
    key, serialized = tf.TFRecordReader().read(files)
    image, label = decode_digit(serialized)
    batch_images, batch_labels, batch_keys = tf.train.shuffle_batch(
        [image, label, key], batch_size=50, capacity=400, min_after_dequeue=200, seed=3,
        num_threads=2, allow_smaller_final_batch=True)
    weights, bias, train_op = softmax_model(batch_images, batch_labels)
    seen = 0
    keys = set()
    with tf.Session() as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        try:
            while not coord.should_stop():
                step_labels, step_keys, _ = sess.run([batch_labels, batch_keys, train_op])
                seen += len(step_labels)
                keys.update(step_keys)
        except tf.errors.OutOfRangeError:
            pass
        finally:
            coord.request_stop()
        coord.join(threads)
        final_weights, final_bias = sess.run([weights, bias])
    assert seen == 5 * 1400
    assert len(keys) == 1400        # b'<file>:<byte offset>' names each record once
    assert all(key.split(b":")[0].decode() in paths for key in keys)
    assert accuracy(final_weights, final_bias, images[1400:], labels[1400:]) > 0.9


# -- CSV and text lines -----------------------------------------------------------------


def write_csv(path, table):
    lines = ["label,x,y,name"] + [f"{int(a)},{float(b)!r},{float(c)!r},row{i}"
                                  for i, (a, b, c) in enumerate(table)]
    path.write_text("\r\n".join(lines[:2]) + "\r\n" + "\n".join(lines[2:]) + "\n")


def test_csv_through_text_line_reader_and_decode_csv(tmp_path):
    rng = np.random.default_rng(7)
    table = np.column_stack([rng.integers(0, 10, 20), rng.normal(size=(20, 2))])
    path = tmp_path / "table.csv"
    write_csv(path, table)
    files = tf.train.string_input_producer([str(path)], num_epochs=1, shuffle=False)
    key, line = tf.TextLineReader(skip_header_lines=1).read(files)
    label, x, y, name = tf.decode_csv(line, record_defaults=[[0], [0.0], [0.0], [""]])
    rows = []
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        try:
            while True:
                rows.append(sess.run([key, label, x, y, name]))
        except tf.errors.OutOfRangeError:
            pass
        coord.request_stop()
        coord.join(threads)
    reference = np.loadtxt(path, delimiter=",", skiprows=1, usecols=(0, 1, 2))
    assert [row[0] for row in rows] == [f"{path}:{n}".encode() for n in range(2, 22)]
    np.testing.assert_array_equal([row[1] for row in rows], reference[:, 0])
    np.testing.assert_allclose([row[2:4] for row in rows], reference[:, 1:],
                               rtol=2e-7)   # float32 parsing of float64 text
    assert [row[4] for row in rows] == [f"row{i}".encode() for i in range(20)]


def test_decode_csv_defaults_quotes_and_errors():
    records = tf.constant(['1,"a,""b""",2.5', ',x,', '7;8'])
    number, text, value = tf.decode_csv(records[:2], [[-1], [""], [9.0]])
    with tf.Session() as sess:
        got = sess.run([number, text, value])
    np.testing.assert_array_equal(got[0], [1, -1])
    assert list(got[1]) == [b'a,"b"', b"x"]
    np.testing.assert_array_equal(got[2], np.array([2.5, 9.0], np.float32))
    semicolons = tf.decode_csv(records[2], [[0], [0]], field_delim=";")
    too_few = tf.decode_csv(records[2:], [[0], [0]])
    required = tf.decode_csv(tf.constant(["1,"]), [[0], tf.constant([], tf.int32)])
    not_int = tf.decode_csv(tf.constant(["1.5"]), [[0]])
    with tf.Session() as sess:
        assert sess.run(semicolons) == [7, 8]
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"^Expect 2 fields but have 1 in record 0$"):
            sess.run(too_few)
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"^Field 1 is required but missing in record 0!$"):
            sess.run(required)
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"^Field 0 in record 0 is not a valid int32: 1.5$"):
            sess.run(not_int)


def test_text_line_and_fixed_length_datasets(tmp_path):
    text = tmp_path / "lines.txt"
    text.write_bytes(b"one\r\ntwo\n\nfour")
    packed = tmp_path / "packed.bin"
    packed.write_bytes(b"HD" + np.arange(6, dtype=np.int16).tobytes() + b"F")
    lines = tf.data.TextLineDataset(str(text)).make_one_shot_iterator().get_next()
    records = tf.data.FixedLengthRecordDataset(
        [str(packed)], record_bytes=4, header_bytes=2, footer_bytes=1)
    values = records.map(lambda r: tf.decode_raw(r, tf.int16)).batch(3)
    batch = values.make_one_shot_iterator().get_next()
    with tf.Session() as sess:
        assert [sess.run(lines) for _ in range(4)] == [b"one", b"two", b"", b"four"]
        with pytest.raises(tf.errors.OutOfRangeError):
            sess.run(lines)
        np.testing.assert_array_equal(sess.run(batch), np.arange(6).reshape(3, 2))


def test_whole_file_reader_read_file_and_write_file(tmp_path):
    contents = {tmp_path / "a.bin": b"\x00\x01abc", tmp_path / "b.bin": b""}
    for path, data in contents.items():
        path.write_bytes(data)
    files = tf.FIFOQueue(4, [tf.string], shapes=[[]])
    name, value = tf.WholeFileReader().read(files)
    target = tmp_path / "new" / "out.bin"
    write = tf.io.write_file(str(target), tf.read_file(str(tmp_path / "a.bin")))
    missing = tf.io.read_file(str(tmp_path / "missing.bin"))
    with tf.Session() as sess:
        sess.run(files.enqueue_many([[str(path) for path in contents]]))
        sess.run(files.close())
        got = dict(sess.run([name, value]) for _ in contents)
        sess.run(write)
        with pytest.raises(tf.errors.NotFoundError, match="missing.bin"):
            sess.run(missing)
    assert got == {str(path).encode(): data for path, data in contents.items()}
    assert target.read_bytes() == b"\x00\x01abc"


def test_slice_input_producer_gives_matching_rows_every_epoch():
    features = np.arange(10, dtype=np.float32).reshape(5, 2)
    labels = np.arange(5, dtype=np.int64) * 10
    feature, label = tf.train.slice_input_producer([features, labels], num_epochs=2, seed=1)
    rows = []
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        try:
            while True:
                rows.append(sess.run([feature, label]))
        except tf.errors.OutOfRangeError:
            pass
        coord.request_stop()
        coord.join(threads)
    assert len(rows) == 10
    for feature_row, label_row in rows:
        np.testing.assert_array_equal(feature_row, features[label_row // 10])
    assert sorted(label for _, label in rows) == sorted(list(labels) * 2)


# -- image codecs ----------------------------------------------------------------------


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_png_round_trip_and_pillow_agrees(channels):
    pixels = np.random.default_rng(channels).integers(0, 256, (5, 7, channels), np.uint8)
    png = tf.image.encode_png(tf.constant(pixels))
    decoded = tf.image.decode_png(png)
    assert decoded.shape.as_list() == [None, None, None]
    with tf.Session() as sess:
        data, back = sess.run([png, decoded])
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    np.testing.assert_array_equal(back, pixels)
    read = np.asarray(Image.open(io.BytesIO(data)))
    np.testing.assert_array_equal(read.reshape(pixels.shape), pixels)


def test_decode_png_channels_and_uint16():
    rgba = np.random.default_rng(1).integers(0, 256, (4, 3, 4), np.uint8)
    data = png_of(Image.fromarray(rgba, "RGBA"))
    gray16 = np.random.default_rng(2).integers(0, 65536, (3, 2), np.uint16)
    data16 = png_of(Image.fromarray(gray16))                # Pillow: mode I;16
    rgb = tf.image.decode_png(data, channels=3)
    wide = tf.image.decode_png(data16, dtype=tf.uint16)
    widened = tf.image.decode_png(data, channels=4, dtype=tf.uint16)
    assert rgb.shape.as_list() == [None, None, 3]
    with tf.Session() as sess:
        got_rgb, got_wide, got_widened = sess.run([rgb, wide, widened])
    np.testing.assert_array_equal(got_rgb, rgba[:, :, :3])
    np.testing.assert_array_equal(got_wide[:, :, 0], gray16)
    np.testing.assert_array_equal(got_widened, rgba.astype(np.uint16) * 257)


def png_of(picture, kind="PNG", **options):
    buffer = io.BytesIO()
    picture.save(buffer, format=kind, **options)
    return buffer.getvalue()


def test_jpeg_decode_matches_pillow_and_encode_is_close():
    rows, cols = np.mgrid[0:16, 0:16]
    smooth = np.stack([rows * 8 + cols * 4, 200 - rows * 6, 60 + cols * 5], axis=-1)
    smooth = smooth.astype(np.uint8)           # gentle gradients: JPEG keeps them well
    data = png_of(Image.fromarray(smooth, "RGB"), "JPEG", quality=90)
    decoded = tf.image.decode_jpeg(data)
    any_kind = tf.image.decode_image(data)
    as_float = tf.image.decode_image(data, dtype=tf.float32)
    encoded = tf.image.decode_jpeg(tf.image.encode_jpeg(tf.constant(smooth), quality=95))
    with tf.Session() as sess:
        got, got_any, got_float, round_trip = sess.run([decoded, any_kind, as_float, encoded])
    expected = np.asarray(Image.open(io.BytesIO(data)))
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got_any, expected)
    np.testing.assert_allclose(got_float, expected / 255.0, rtol=1e-6)
    assert np.abs(round_trip.astype(int) - smooth).mean() < 2      # lossy, but close


def test_codec_errors_name_what_was_expected():
    with pytest.raises(ValueError, match="channels must be 0, 1, 3, or 4, got 2"):
        tf.image.decode_png(b"", channels=2)
    with pytest.raises(TypeError, match="uint8 or uint16"):
        tf.image.encode_png(tf.zeros([2, 2, 1]))
    bad = tf.image.decode_png(tf.constant(b"not an image"))
    flat = tf.image.encode_png(tf.placeholder(tf.uint8))
    with tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match="Expected image \\(JPEG, PNG, or GIF\\), got unknown format"):
            sess.run(bad)
        with pytest.raises(tf.errors.InvalidArgumentError, match="must be 3-dimensional"):
            sess.run(flat, {flat.op.inputs[0]: np.zeros([2, 2], np.uint8)})
