"""Every record of a converted dataset as the data check reads it (records.py: plain reads through
the indexes) against the frameworks' own readers: tf.data for TFRecord, MXIndexedRecordIO for
RecordIO. Prints JSON: per file, the record count each way and whether all records are equal."""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("MXNET_MKLDNN_ENABLED", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import mxnet as mx  # noqa: E402
import tensorflow as tf  # noqa: E402

from workflow_scripts.data import records  # noqa: E402

root = Path(sys.argv[1])
out = {}
for shard in sorted((root / "tfrecord").glob("*-of-*")):
    kind = records.TFRecordShard()
    n = kind.count(shard)
    # A frame is length (8), its crc (4), the data, the data's crc (4): tf.data yields the data.
    ours = [frame[12:-4] for frame in kind.read(shard, range(n))]
    theirs = [r.numpy() for r in tf.data.TFRecordDataset(str(shard))]
    out[f"tfrecord/{shard.name}"] = {"ours": len(ours), "theirs": len(theirs), "equal": ours == theirs}
for split in ("train", "val"):
    rec_path = root / "recordio" / f"{split}.rec"
    kind = records.RecordIOFile()
    n = kind.count(rec_path)
    # A record is magic (4), flag and length (4), the data: read_idx yields the data.
    ours = [r[8:] for r in kind.read(rec_path, range(n))]
    rec = mx.recordio.MXIndexedRecordIO(str(rec_path.with_suffix(".idx")), str(rec_path), "r")
    theirs = [rec.read_idx(k) for k in rec.keys]
    rec.close()
    out[f"recordio/{split}.rec"] = {"ours": len(ours), "theirs": len(theirs), "equal": ours == theirs}
print(json.dumps(out))
