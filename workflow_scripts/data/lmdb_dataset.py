"""A PyTorch Dataset over the data stage's Caffe2-format LMDB (train/ or val/).

Each DataLoader worker opens its own read-only LMDB environment on first use: an environment
opened before fork must not be used in the child.
"""

import io
import os

import lmdb
import torch
from PIL import Image

from ..common.errors import PermanentError
from . import caffe2_proto
from .caffe2_proto import key


class LMDBImageNet(torch.utils.data.Dataset):
    """Items are (transform(PIL RGB image), label); `raw(i)` gives (JPEG bytes, label) for
    callers that decode elsewhere (e.g. on the GPU)."""

    def __init__(self, path, transform=None):
        self.path = str(path)
        if not os.path.isfile(os.path.join(self.path, "data.mdb")):
            raise FileNotFoundError(f"{self.path} is not an LMDB directory (no data.mdb)")
        self.transform = transform
        env = self._open()
        self.length = env.stat()["entries"]
        env.close()
        self._env, self._pid = None, None

    def _open(self):
        return lmdb.open(
            self.path, subdir=True, readonly=True, lock=False, readahead=False, meminit=False, max_readers=1
        )

    def __len__(self):
        return self.length

    def raw(self, index):
        if not 0 <= index < self.length:
            raise IndexError(index)
        if self._env is None or self._pid != os.getpid():
            self._env, self._pid = self._open(), os.getpid()
        with self._env.begin(buffers=False) as txn:
            value = txn.get(key(index, self.length))
        if value is None:
            raise KeyError(f"{self.path}: no record {index}")
        return caffe2_proto.parse_image_record(value)

    def __getitem__(self, index):
        jpeg, label = self.raw(index)
        try:
            image = Image.open(io.BytesIO(jpeg)).convert("RGB")
        except (OSError, ValueError, SyntaxError) as exc:  # Pillow's words for bytes that are no image
            # The same record fails every attempt until the copy is remade (in a DataLoader worker
            # this line reaches the log inside the worker's traceback, tag included).
            raise PermanentError(
                f"{self.path}/data.mdb: record {index} (key {key(index, self.length).decode()}) does not decode "
                f"({type(exc).__name__}: {exc}); `python -m workflow_scripts.data.verify --data "
                f"{os.path.dirname(self.path)} --level full` checks the copy. Fix: snakemake --forcerun lmdb"
            ) from None
        return (self.transform(image) if self.transform else image), label

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_env"], state["_pid"] = None, None
        return state
