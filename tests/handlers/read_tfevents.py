"""Independent reader for kindling's TensorBoard event files (tests/handlers/tensorboard_test.cpp).

Usage: read_tfevents.py EVENT_FILE

Shares no code with kindling: it reads the TFRecord framing (uint64 length, masked CRC32C of
the length, data, masked CRC32C of the data, all little-endian), checks both CRCs with its
own CRC32C, and decodes every record as TensorFlow's Event message with the protobuf runtime
(Debian's python3-protobuf), from message descriptions built here with the field numbers of
tensorflow/core/util/event.proto and tensorflow/core/framework/summary.proto. It prints

    VERSION <wall_time> <file_version>          for the first record
    SCALAR <step> <value> <wall_time> <tag>     for each scalar (the tag is the rest of the line)
    HISTO <step> <min> <max> <num> <sum> <sum_squares> <limits> <counts> <tag>
                                                for each histogram (limits and counts joined by ",")

with repr() numbers (they read back exactly). Exit status 0 when the whole file is valid,
1 with the reason on stderr otherwise, 2 when google.protobuf cannot be imported.
"""
import struct
import sys

try:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError as error:  # pragma: no cover - environment problem, not a kindling bug
    sys.stderr.write("read_tfevents.py needs python3-protobuf (apt-get install python3-protobuf): %s\n" % error)
    sys.exit(2)


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    """TensorFlow's Event / Summary / Summary.Value / HistogramProto, only the fields kindling writes.

    proto2 syntax so that HasField tells which fields were written (the wire format is the
    same as proto3's)."""
    F = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="kindling_test_event.proto", package="kindling_test",
                                               syntax="proto2")
    value = proto.message_type.add(name="Value")
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL)
    value.field.add(name="histo", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".kindling_test.HistogramProto")
    histo = proto.message_type.add(name="HistogramProto")
    for number, name in enumerate(["min", "max", "num", "sum", "sum_squares"], start=1):
        histo.field.add(name=name, number=number, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    for number, name in [(6, "bucket_limit"), (7, "bucket")]:
        field = histo.field.add(name=name, number=number, type=F.TYPE_DOUBLE, label=F.LABEL_REPEATED)
        field.options.packed = True  # summary.proto's [packed = true]
    summary = proto.message_type.add(name="Summary")
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".kindling_test.Value")
    event = proto.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".kindling_test.Summary")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    descriptor = pool.FindMessageTypeByName("kindling_test.Event")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def fail(message):
    sys.stderr.write("read_tfevents.py: %s\n" % message)
    sys.exit(1)


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    offset = 0
    while offset < len(data):
        if len(data) - offset < 12:
            fail("truncated record header at byte %d" % offset)
        header = data[offset:offset + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[offset + 8:offset + 12])
        if length_crc != masked_crc32c(header):
            fail("length CRC mismatch at byte %d: stored %#010x, computed %#010x" %
                 (offset, length_crc, masked_crc32c(header)))
        start = offset + 12
        if len(data) - start < length + 4:
            fail("truncated record data at byte %d (length %d)" % (start, length))
        payload = data[start:start + length]
        (data_crc,) = struct.unpack("<I", data[start + length:start + length + 4])
        if data_crc != masked_crc32c(payload):
            fail("data CRC mismatch at byte %d: stored %#010x, computed %#010x" %
                 (start, data_crc, masked_crc32c(payload)))
        yield offset, payload
        offset = start + length + 4


def main():
    if len(sys.argv) != 2:
        fail("usage: read_tfevents.py EVENT_FILE")
    # The CRC itself against RFC 3720's check value, so that a wrong CRC cannot agree with itself.
    if crc32c(b"123456789") != 0xE3069283 or crc32c(bytes(32)) != 0x8A9136AA:
        fail("this script's CRC32C is wrong")
    Event = event_class()
    count = 0
    for offset, payload in records(sys.argv[1]):
        event = Event()
        event.ParseFromString(payload)
        if event.SerializeToString() != payload:
            fail("record at byte %d is not canonical protobuf of the expected fields" % offset)
        if not event.HasField("wall_time"):
            fail("record at byte %d has no wall_time" % offset)
        if count == 0:
            if not event.HasField("file_version") or event.HasField("summary"):
                fail("the first record is not a file_version event")
            print("VERSION %r %s" % (event.wall_time, event.file_version))
        else:
            if event.HasField("file_version") or not event.HasField("step") or len(event.summary.value) != 1:
                fail("record at byte %d is not a one-scalar event" % offset)
            value = event.summary.value[0]
            if not value.HasField("tag") or value.HasField("simple_value") == value.HasField("histo"):
                fail("record at byte %d has a value without tag, or not exactly one of simple_value and histo" %
                     offset)
            if value.HasField("simple_value"):
                print("SCALAR %d %r %r %s" % (event.step, value.simple_value, event.wall_time, value.tag))
            else:
                h = value.histo
                if len(h.bucket_limit) != len(h.bucket) or not h.bucket:
                    fail("record at byte %d has a histogram with %d limits and %d buckets" %
                         (offset, len(h.bucket_limit), len(h.bucket)))
                print("HISTO %d %r %r %r %r %r %s %s %s" % (
                    event.step, h.min, h.max, h.num, h.sum, h.sum_squares, ",".join(repr(x) for x in h.bucket_limit),
                    ",".join(repr(x) for x in h.bucket), value.tag))
        count += 1
    if count == 0:
        fail("the file is empty")


if __name__ == "__main__":
    main()
