"""What the lent GPU machine needs beside the checkout, made here, cut to what one call carries.

The device machine has torch but no DALI, lmdb or NVML bindings, and no registry; a call carries
at most 64 MiB with the working tree, and what an earlier call left stays only while the machine
is warm (the device tool's README). So the wheels for the device's Python, at the versions
envs/torch.txt pins, are downloaded here. The small ones (lmdb, nvidia-ml-py) and the
ImageNet-like set's source photos (imagenet_like --save-sources) go with the first call, which
installs them into .work/site (ignored, so it stays): enough to make the photographs' LMDB and run
synthetic points. DALI and its needs are unpacked here into one tar.xz cut into pieces; each call
carries the next piece, and the last joins them, checks the join's sha256 and unpacks it into
.work/site: from then on real-data points run.

    .venv/bin/python -m benchmarks.device_carry --out .carry   # here; prints each call's carry and command

(an interpreter with Pillow, NumPy and matplotlib, as the workflow's own: imagenet_like saves the
photographs).

Packing takes minutes on two cores; what is already in --out is reused.
"""

import argparse
import hashlib
import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIRST = ("lmdb", "nvidia-ml-py")  # small: carried as wheels in the first call
PACKED = ("nvidia-dali-cuda130", "nvidia-nvimgcodec-cu13", "nvidia-nvjpeg")  # packed and cut
# DALI's needs that envs/torch.txt leaves to the resolver, at the versions its CI environment takes
DALI_NEEDS = ("optree==0.20.0", "astunparse==1.6.3", "gast==0.7.0", "six==1.17.0")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
DEVICE_PYTHON = "3.12"  # the device machine's (the device tool's KINDS.md)
TREE_MIB = 9  # room left for the working tree, which travels with every call (about 5 MiB)
SITE = ".work/site"


def pins(names, requirements=REPO / "envs" / "torch.txt"):
    """NAME==VERSION of each of names as envs/torch.txt pins it (the versions' one home)."""
    found = {}
    for line in requirements.read_text().splitlines():
        m = re.match(r"\s*([A-Za-z0-9_.-]+)==([^\s#]+)", line)
        if m and m.group(1).lower() in names:
            found[m.group(1).lower()] = f"{m.group(1)}=={m.group(2)}"
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"{requirements}: no '==' pin for {', '.join(missing)}")
    return [found[n] for n in names]


def download_command(specs, dest):
    """pip's words for the wheels of specs for the device's Python, without their needs (named in
    specs)."""
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    cmd += ["--python-version", DEVICE_PYTHON, "--implementation", "cp", "--dest", str(dest)]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    return cmd + list(specs)


def download(specs, dest):
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(download_command(specs, dest), check=True)
    return sorted(dest.glob("*.whl"))


def pack(wheels, archive):
    """Every wheel unpacked into one tree (a wheel is a zip of its installed files), as tar.xz: by
    xz on every CPU where it is installed (Python's lzma takes one and is several times slower)."""
    site = archive.parent / "site"
    for w in wheels:
        with zipfile.ZipFile(w) as z:
            z.extractall(site)
    tmp = archive.with_name(archive.name + ".tmp")
    names = sorted(p.name for p in site.iterdir())
    if shutil.which("xz"):
        with tmp.open("wb") as f:
            tar = subprocess.Popen(["tar", "-C", str(site), "-cf", "-", *names], stdout=subprocess.PIPE)
            subprocess.run(["xz", "-T0", "-6", "-c"], stdin=tar.stdout, stdout=f, check=True)
            if tar.wait():
                raise SystemExit(f"tar of {site} failed")
    else:
        with tarfile.open(tmp, "w:xz", preset=6) as t:
            for n in names:
                t.add(site / n, arcname=n)
    tmp.rename(archive)


def cut(archive, first_bytes, piece_bytes):
    """archive cut into pieces, the first of first_bytes (room left beside the first call's other
    paths), the others of piece_bytes (the last shorter): their paths, in order."""
    for old in archive.parent.glob(archive.name + ".part-*"):
        old.unlink()
    pieces = []
    with archive.open("rb") as f:
        while chunk := f.read(piece_bytes if pieces else first_bytes):
            p = archive.parent / f"{archive.name}.part-{len(pieces):02d}"
            p.write_bytes(chunk)
            pieces.append(p)
    return pieces


def size(path):
    return sum(p.stat().st_size for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file())


def calls(first, pieces, digest):
    """[(carry, command prefix)], one a call, back to back while the machine is warm: the first
    carries `first` (the small wheels and the photos) and the first piece."""
    rel = [str(p.relative_to(REPO)) for p in pieces]
    install = (
        f"python3 -m pip install -q --no-index --no-deps --no-compile --target {SITE} "
        f"{first[0].relative_to(REPO)}/*.whl || exit 3"
    )
    plan = [[[*(str(p.relative_to(REPO)) for p in first), rel[0]], [install]]]
    plan += [[[r], []] for r in rel[1:]]
    stem = rel[0].rsplit(".part-", 1)[0]
    plan[-1][1] += [
        f"test $(ls {stem}.part-* | wc -l) = {len(rel)} || {{ echo 'pieces missing: the machine went back between "
        f"calls; start again from the first'; exit 3; }}",
        f"echo '{digest}  -' > /tmp/carry.sha256 && cat {stem}.part-* | sha256sum -c --quiet /tmp/carry.sha256 "
        f"&& cat {stem}.part-* | tar -xJ -C {SITE} || exit 3",
    ]
    return [(carry, "; ".join([*cmds, f"export PYTHONPATH=$PWD/{SITE}"])) for carry, cmds in plan]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / ".carry", help="an ignored folder of the checkout")
    ap.add_argument("--call-mib", type=int, default=64, help="what one call may carry, the working tree included")
    ap.add_argument("--dry-run", action="store_true", help="print the downloads, make nothing")
    a = ap.parse_args(argv)
    out = a.out.resolve()
    if not out.is_relative_to(REPO):
        raise SystemExit(f"--out {a.out}: must lie inside the checkout ({REPO}), which is what travels")
    if a.dry_run:
        print(shlex.join(download_command(pins(PACKED) + list(DALI_NEEDS), out / "packed-wheels")))
        print(shlex.join(download_command(pins(FIRST), out / "wheels")))
        return
    limit = (a.call_mib - TREE_MIB) << 20
    archive = out / "site.tar.xz"
    if not archive.is_file():
        pack(download(pins(PACKED) + list(DALI_NEEDS), out / "packed-wheels"), archive)
    download(pins(FIRST), out / "wheels")
    photos = out / "photos"
    if not any(photos.glob("*")):  # none yet, or an earlier try's that stopped part way
        missing = [m for m in ("PIL", "numpy", "matplotlib") if importlib.util.find_spec(m) is None]
        if missing:
            raise SystemExit(
                f"{sys.executable} lacks {', '.join(missing)}, which imagenet_like needs to save the photographs: "
                f"run this with .venv/bin/python"
            )
        shutil.rmtree(photos, ignore_errors=True)
        save = [sys.executable, "-m", "benchmarks.imagenet_like", "--save-sources", str(photos)]
        subprocess.run(save, check=True, cwd=REPO)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    first = [out / "wheels", photos]
    room = limit - sum(size(p) for p in first)
    if room < 1 << 20:
        raise SystemExit(f"{', '.join(map(str, first))}: {limit - room} bytes, too many for one call beside a piece")
    pieces = cut(archive, room, limit)
    print(f"{archive.name}: {size(archive) / 2**20:.1f} MiB in {len(pieces)} pieces, sha256 {digest}")
    for i, (carry, prefix) in enumerate(calls(first, pieces, digest), 1):
        print(f"call {i}: carry {json.dumps(carry)}\n  {prefix}; <the call's benchmark>")
    print(f"then, while warm: export PYTHONPATH=$PWD/{SITE}; real-data points need every piece joined")


if __name__ == "__main__":
    main()
