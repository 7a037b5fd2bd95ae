"""What the index stage depends on in dataset.root, cheaply enough to ask at every parse: the
names in each folder that holds images (train/, train/<wnid>/, val/ and its synset folders) and
the size and mtime of the val label files in use (docs/data.md#files-added-later).

fingerprint() digests them; plan/data_plan.py passes it to the index as a param, so adding,
removing or renaming an image, or editing a label file, reruns the index. A folder's names are
read again only where its ctime or mtime changed since the last parse (a cache in data_dir): a
parse costs one stat a folder, and a folder touched with the same names changes nothing. The
ctime counts because tar sets a folder's mtime back to the archive's; nothing sets the ctime back.

settling() tells a tree still being written (extracted, copied) from a complete one: a folder
whose ctime is within dataset.settle_s of now. The index job refuses such a tree, naming the
folder, rather than index part of it as the whole.
"""

import hashlib
import json
import os
import time
from pathlib import Path


def folders(root):
    """The folders whose names the index reads: train/ and val/, and their subfolders."""
    root = Path(root)
    out = []
    for top in (root / "train", root / "val"):
        if not top.is_dir():
            continue
        out.append(top)
        with os.scandir(top) as it:
            out += sorted(Path(e.path) for e in it if e.is_dir(follow_symlinks=True))
    return out


def _names_digest(folder):
    return hashlib.sha256("\n".join(sorted(os.listdir(folder))).encode("utf-8", "surrogateescape")).hexdigest()


def fingerprint(root, label_files=(), cache_path=None):
    """A sha256 over every image folder's sorted names and the label files' sizes and mtimes."""
    root = Path(root)
    try:
        cache = json.loads(Path(cache_path).read_text()) if cache_path else {}
    except (OSError, ValueError):
        cache = {}
    seen, h = {}, hashlib.sha256()
    for folder in folders(root):
        st = folder.stat()
        key = [st.st_ctime_ns, st.st_mtime_ns]
        rel = str(folder.relative_to(root))
        known = cache.get(rel)
        digest = known[2] if known and known[:2] == key else _names_digest(folder)
        seen[rel] = [*key, digest]
        h.update(f"{rel}\0{digest}\n".encode("utf-8", "surrogateescape"))
    for f in sorted(str(p) for p in label_files if p):
        st = os.stat(f)
        h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    if cache_path and seen != cache:
        try:
            Path(cache_path).parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(f"{cache_path}.{os.getpid()}")
            tmp.write_text(json.dumps(seen))
            os.replace(tmp, cache_path)
        except OSError:  # a read-only data_dir: every parse reads the names again
            pass
    return h.hexdigest()


def settling(root, settle_s, label_files=(), now=None):
    """The line that says the tree is still being written (a folder or label file changed within
    settle_s seconds), else None."""
    if not settle_s:
        return None
    now = time.time() if now is None else now
    changed = [(Path(p).stat().st_ctime, Path(p)) for p in [*folders(root), *(f for f in label_files if f)]]
    if not changed:
        return None
    when, newest = max(changed)
    if now - when >= settle_s:
        return None
    return (
        f"dataset.root {root}: {newest} changed {now - when:.0f} s ago, so the tree may still be being written "
        f"(extracted or copied); the index reads it only once nothing in its image folders, label files or archives "
        f"has changed for dataset.settle_s = {settle_s:g} s. Run again once it is complete, or set dataset.settle_s: 0"
    )
