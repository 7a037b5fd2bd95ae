"""Caffe2's TensorProto / TensorProtos messages, defined at run time.

No maintained package ships caffe2_pb2 any more, so the two messages Caffe2's image LMDBs use
are declared here with the field numbers and enum values of caffe2/proto/caffe2.proto; the wire
format is therefore the one Caffe2's ImageInputOp parsed.
"""

from google.protobuf import descriptor_pb2, descriptor_pool

try:
    from google.protobuf.message_factory import GetMessageClass
except ImportError:  # protobuf < 4.21
    from google.protobuf import message_factory

    def GetMessageClass(desc):
        return message_factory.MessageFactory().GetPrototype(desc)


# caffe2.proto TensorProto.DataType values used here.
INT32, STRING = 2, 4


def _build():
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="dlscale_caffe2.proto", package="caffe2", syntax="proto2")
    tp = fdp.message_type.add(name="TensorProto")
    dt = tp.enum_type.add(name="DataType")
    for name, num in [
        ("UNDEFINED", 0),
        ("FLOAT", 1),
        ("INT32", 2),
        ("BYTE", 3),
        ("STRING", 4),
        ("BOOL", 5),
        ("UINT8", 6),
        ("INT8", 7),
        ("UINT16", 8),
        ("INT16", 9),
        ("INT64", 10),
        ("FLOAT16", 12),
        ("DOUBLE", 13),
    ]:
        dt.value.add(name=name, number=num)
    rep, opt = F.LABEL_REPEATED, F.LABEL_OPTIONAL
    tp.field.add(name="dims", number=1, label=rep, type=F.TYPE_INT64)
    tp.field.add(
        name="data_type",
        number=2,
        label=opt,
        type=F.TYPE_ENUM,
        type_name=".caffe2.TensorProto.DataType",
        default_value="FLOAT",
    )
    f = tp.field.add(name="float_data", number=3, label=rep, type=F.TYPE_FLOAT)
    f.options.packed = True
    f = tp.field.add(name="int32_data", number=4, label=rep, type=F.TYPE_INT32)
    f.options.packed = True
    tp.field.add(name="byte_data", number=5, label=opt, type=F.TYPE_BYTES)
    tp.field.add(name="string_data", number=6, label=rep, type=F.TYPE_BYTES)
    tp.field.add(name="name", number=7, label=opt, type=F.TYPE_STRING)
    tps = fdp.message_type.add(name="TensorProtos")
    tps.field.add(name="protos", number=1, label=rep, type=F.TYPE_MESSAGE, type_name=".caffe2.TensorProto")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return (
        GetMessageClass(pool.FindMessageTypeByName("caffe2.TensorProto")),
        GetMessageClass(pool.FindMessageTypeByName("caffe2.TensorProtos")),
    )


TensorProto, TensorProtos = _build()


def image_record(jpeg: bytes, label: int) -> bytes:
    """[encoded image (STRING, dims [1]), label (INT32, dims [1])], as Caffe2's ResNet-50
    trainer read from LMDB."""
    protos = TensorProtos()
    img = protos.protos.add(data_type=STRING, dims=[1])
    img.string_data.append(jpeg)
    protos.protos.add(data_type=INT32, dims=[1], int32_data=[label])
    return protos.SerializeToString()


def parse_image_record(value: bytes):
    """-> (jpeg bytes, label)."""
    protos = TensorProtos.FromString(value)
    if len(protos.protos) != 2 or protos.protos[0].data_type != STRING or protos.protos[1].data_type != INT32:
        raise ValueError("not a Caffe2 [encoded image, label] TensorProtos record")
    return protos.protos[0].string_data[0], protos.protos[1].int32_data[0]


def key(position, count):
    """An LMDB record's key: its position, zero-padded (Caffe2's image LMDBs sort by key)."""
    return f"{position:0{max(8, len(str(count)))}d}".encode()
