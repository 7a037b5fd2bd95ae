"""The data stage's output files read record by record, for verify.py: TFRecord shards through
their DALI index, RecordIO through its .idx, with the standard library only (so any environment,
the driver's included, can check them); LMDB through the lmdb package, imported only when an LMDB
file is read.

Each kind of file answers: how many records it holds (from its index, never by reading the data),
whether its index fits the file, and the bytes of chosen records (plain reads: a memory map of a
short file faults on access). LMDB maps its file; of a file of the wrong size only the header pages
are read, and its records only once its size matched.
"""

import struct
from pathlib import Path

# MXNet RecordIO framing (dmlc-core recordio.h): uint32 magic, uint32 (cflag << 29 | length), the
# data, zero padding to 4 bytes. cflag 0 is a whole record; 1, 2, 3 the first, middle, last part.
RECORDIO_MAGIC = 0xCED7230A
_LENGTH_MASK = (1 << 29) - 1


class Damaged(Exception):
    """A file's own structure is wrong (an index pointing past its end, a bad frame)."""


def last_line(path):
    """The last non-empty line of a text file, reading only its end."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        end = f.tell()
        block = 4096
        while True:
            f.seek(max(0, end - block))
            lines = f.read().split(b"\n")
            full = [ln for ln in (lines if block >= end else lines[1:]) if ln.strip()]
            if full or block >= end:
                return full[-1].decode() if full else ""
            block *= 4


def line_count(path):
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
    return n


class Lines:
    """An index or list file: one record per line."""

    def count(self, path):
        return line_count(path)

    def consistency(self, path, size):
        return None

    read = None  # hashed whole: these files are small


class TFRecordShard:
    """A shard; its records are located by idx/<shard>.idx ("offset size" per record, size
    including the 16 bytes of TFRecord framing)."""

    @staticmethod
    def index(path):
        idx = Path(path).parent / "idx" / f"{Path(path).name}.idx"
        try:
            return [tuple(map(int, ln.split())) for ln in idx.read_text().splitlines() if ln.strip()]
        except (OSError, ValueError) as exc:
            raise Damaged(f"its index {idx} cannot be read ({exc})")

    def count(self, path):
        return line_count(Path(path).parent / "idx" / f"{Path(path).name}.idx")

    def consistency(self, path, size):
        idx = Path(path).parent / "idx" / f"{Path(path).name}.idx"
        try:
            last = last_line(idx).split()
            end = int(last[0]) + int(last[1]) if last else 0
        except (OSError, ValueError, IndexError) as exc:
            return f"its index {idx} cannot be read ({exc})"
        if end != size:
            return f"its index idx/{Path(path).name}.idx ends at byte {end}, the file at {size}"
        return None

    def read(self, path, positions):
        entries = self.index(path)
        with open(path, "rb") as f:
            for p in positions:
                offset, size = entries[p]
                f.seek(offset)
                frame = f.read(size)
                if len(frame) != size or struct.unpack("<Q", frame[:8])[0] != size - 16:
                    raise Damaged(f"record {p} at byte {offset} is not a whole TFRecord frame of {size} bytes")
                yield frame


class RecordIOFile:
    """A .rec; its records are located by the .idx beside it ("key<TAB>offset" per record)."""

    @staticmethod
    def offsets(path):
        idx = Path(path).with_suffix(".idx")
        try:
            return [int(ln.split("\t")[1]) for ln in idx.read_text().splitlines() if ln.strip()]
        except (OSError, ValueError, IndexError) as exc:
            raise Damaged(f"its index {idx.name} cannot be read ({exc})")

    def count(self, path):
        return line_count(Path(path).with_suffix(".idx"))

    def consistency(self, path, size):
        idx = Path(path).with_suffix(".idx")
        try:
            last = last_line(idx).split("\t")
            key, offset = (int(last[0]), int(last[1])) if last != [""] else (None, None)
        except (OSError, ValueError, IndexError) as exc:
            return f"its index {idx.name} cannot be read ({exc})"
        if key is None:
            return None
        with open(path, "rb") as f:
            try:
                self._record(f, offset, size)
            except Damaged as exc:
                return f"the last indexed record (key {key}): {exc}"
        return None

    @staticmethod
    def _record(f, offset, size):
        """The record's bytes as stored (headers and parts included, padding not)."""
        out, pos = b"", offset
        while True:
            f.seek(pos)
            head = f.read(8)
            if len(head) < 8:
                raise Damaged(f"its header at byte {pos} lies beyond the end of the file ({size} bytes)")
            magic, lrec = struct.unpack("<II", head)
            if magic != RECORDIO_MAGIC:
                raise Damaged(f"no RecordIO header at byte {pos}")
            length, cflag = lrec & _LENGTH_MASK, lrec >> 29
            data = f.read(length)
            if len(data) < length:
                raise Damaged(f"its {length} bytes from byte {pos + 8} run past the end of the file ({size} bytes)")
            out += head + data
            if cflag in (0, 3):
                return out
            pos += 8 + length + (-length % 4)

    def read(self, path, positions):
        offsets = self.offsets(path)
        size = Path(path).stat().st_size
        with open(path, "rb") as f:
            for p in positions:
                yield self._record(f, offsets[p], size)


class LMDBFile:
    """data.mdb of a Caffe2 LMDB directory (keys: the zero-padded record position)."""

    @staticmethod
    def _open(path):
        try:
            import lmdb
        except ImportError:
            import sys

            raise ImportError(
                f"the lmdb package does not import in {sys.executable}: LMDB files are checked only "
                f"where it does (the data stage's and the trainers' environments, config envs.pytorch)"
            )
        return lmdb.open(str(Path(path).parent), subdir=True, readonly=True, lock=False, readahead=False, max_readers=1)

    def count(self, path):
        env = self._open(path)
        try:
            return env.stat()["entries"]
        finally:
            env.close()

    def consistency(self, path, size):
        env = self._open(path)
        try:
            end = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
        finally:
            env.close()
        if size < end:
            return f"its last page ends at byte {end}: reading it would fault (SIGBUS)"
        return None

    def read(self, path, positions):
        import lmdb

        from .caffe2_proto import key

        env = self._open(path)
        try:
            n = env.stat()["entries"]
            with env.begin(buffers=False) as txn:
                for p in positions:
                    try:
                        value = txn.get(key(p, n))
                    except lmdb.Error as exc:
                        raise Damaged(f"record {p} cannot be read ({exc})")
                    if value is None:
                        raise Damaged(f"record {p} is missing")
                    yield key(p, n) + value
        finally:
            env.close()


class Opaque:
    """Any other file: only its size and checksum are known."""

    def count(self, path):
        return None

    def consistency(self, path, size):
        return None

    read = None


def kind(fmt, relpath):
    rel = Path(relpath)
    if fmt == "tfrecord":
        return Lines() if rel.parts[0] == "idx" else TFRecordShard()
    if fmt == "recordio":
        return RecordIOFile() if rel.suffix == ".rec" else Lines()
    if fmt == "lmdb" and rel.name == "data.mdb":
        return LMDBFile()
    return Opaque()
