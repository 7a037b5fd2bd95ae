"""Read a recordio output dir back with MXNet: MXIndexedRecordIO record by record, and
ImageRecordIter over the val file. Prints JSON."""

import hashlib
import json
import os
import sys

os.environ.setdefault("MXNET_MKLDNN_ENABLED", "0")
import mxnet as mx  # noqa: E402

root = sys.argv[1]
out = {}
for split in ("train", "val"):
    rec = mx.recordio.MXIndexedRecordIO(f"{root}/{split}.idx", f"{root}/{split}.rec", "r")
    items = []
    for key in rec.keys:
        header, img = mx.recordio.unpack(rec.read_idx(key))
        decoded = mx.image.imdecode(img, to_rgb=1)
        items.append(
            {
                "key": key,
                "id": int(header.id),
                "label": float(header.label),
                "shape": list(decoded.shape),
                "sha256": hashlib.sha256(img).hexdigest(),
            }
        )
    rec.close()
    out[split] = items
it = mx.io.ImageRecordIter(
    path_imgrec=f"{root}/val.rec",
    path_imgidx=f"{root}/val.idx",
    data_shape=(3, 32, 32),
    resize=32,
    batch_size=1,
    preprocess_threads=2,
)
labels = []
for batch in it:
    n = batch.data[0].shape[0] - batch.pad
    labels += batch.label[0].asnumpy()[:n].astype(int).tolist()
out["val_iter_labels"] = labels
print(json.dumps(out))
