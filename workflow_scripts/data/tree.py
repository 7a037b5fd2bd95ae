"""An extracted tree's image bytes: one file each, under the dataset root (layout.py finds them)."""

from pathlib import Path

from ..common.errors import StageError


class Reader:
    def __init__(self, root):
        self.root = Path(root)

    def read(self, split, location, relpath):
        path = self.root / relpath
        try:
            return path.read_bytes()
        except OSError as exc:
            raise StageError(f"{path}: cannot read ({exc}); was the dataset changed after indexing?") from None

    def close(self):
        pass
