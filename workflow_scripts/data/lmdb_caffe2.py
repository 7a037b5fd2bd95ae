"""LMDB databases train/ and val/ in Caffe2's format: key = zero-padded position, value = a
serialized TensorProtos [encoded JPEG, int32 label]. lmdb_dataset.py reads them for PyTorch."""

import lmdb

from ..common.errors import run_main
from . import caffe2_proto, convert
from .caffe2_proto import key

# Address space reserved for the map, not disk: LMDB grows data.mdb only as pages are written.
MAP_SIZE = 1 << 40
# Fixed transaction size: the same records always give the same pages, hence the same bytes.
TXN_RECORDS = 1000


def write_split(out, split, records, count):
    path = out / split
    path.mkdir()
    # lock=False: this process is the only writer of a directory nobody else sees yet, and no
    # lock.mdb (which holds pids) ends up among the outputs.
    env = lmdb.open(str(path), map_size=MAP_SIZE, subdir=True, lock=False, meminit=True)
    txn = env.begin(write=True)
    for n, r in enumerate(records, start=1):
        txn.put(key(r.position, count), caffe2_proto.image_record(r.data, r.label), append=True)
        if n % TXN_RECORDS == 0:
            txn.commit()
            txn = env.begin(write=True)
    txn.commit()
    env.sync(True)
    env.close()
    return sorted(p for p in path.iterdir())


def main():
    a = convert.arg_parser(__doc__.splitlines()[0]).parse_args()
    convert.run("lmdb", write_split, a, {"value": "caffe2.TensorProtos[STRING jpeg, INT32 label]"})


if __name__ == "__main__":
    run_main(main)
