"""Read an lmdb output dir back through the project's PyTorch Dataset and a 2-worker
DataLoader. Prints JSON."""

import hashlib
import json
import sys

import torch

from workflow_scripts.data.lmdb_dataset import LMDBImageNet


def describe(item):
    image, label = item
    return {"label": label, "size": list(image.size), "mode": image.mode}


out = {}
for split in ("train", "val"):
    ds = LMDBImageNet(f"{sys.argv[1]}/{split}", transform=None)
    raw = [ds.raw(i) for i in range(len(ds))]
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, collate_fn=lambda b: [describe(x) for x in b])
    decoded = [d for batch in loader for d in batch]
    out[split] = [
        {
            "label": int(lab),
            "sha256": hashlib.sha256(jpeg).hexdigest(),
            **{k: v for k, v in d.items() if k != "label"},
            "loader_label": d["label"],
        }
        for (jpeg, lab), d in zip(raw, decoded)
    ]
print(json.dumps(out))
