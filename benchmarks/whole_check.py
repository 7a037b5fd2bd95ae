"""The whole-file check's rate (workflow_scripts/data/verify.py, `whole`): every file of a converted
format read and hashed against its manifest, N files at a time.

For each thread count it runs the check `--repeats` times with the files evicted from the page
cache first (posix_fadvise, as the training job's cache clearing does: a read from the disk), then
once warm (the files just read: the hashing alone). Prints files, bytes, MB/s mean and spread, and
what the cold rate would make of ILSVRC2012's three copies (`--project-gib`, 440 by default).

    .venv/bin/python benchmarks/whole_check.py --data /tmp/wc/out-recordio --threads 1,2 --repeats 3

An LMDB needs an interpreter with the lmdb package (e.g. .envs/torch/bin/python).
"""

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from workflow_scripts.cluster import page_cache  # noqa: E402
from workflow_scripts.data import verify  # noqa: E402


def rate(data, threads):
    problems, seen, nbytes, seconds = verify.whole(data, threads)
    if problems:
        sys.exit(f"{data} does not match its manifest: {problems[0]}")
    return len(seen), nbytes, nbytes / seconds / 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="a converted format's directory (with manifest.json)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--project-gib", type=float, default=440, help="bytes to project the cold rate onto")
    a = ap.parse_args(argv)
    data = Path(a.data)
    files = [data / rel for rel in verify._manifest(data)["files"]]
    print(f"{data}: whole-file check; cold = evicted from the page cache before each run")
    for threads in (int(t) for t in a.threads.split(",")):
        cold = []
        for _ in range(a.repeats):
            page_cache.evict(files)
            n, nbytes, mb_s = rate(data, threads)
            cold.append(mb_s)
        warm = rate(data, threads)[2]
        sd = statistics.stdev(cold) if len(cold) > 1 else 0.0
        hours = a.project_gib * 2**30 / (statistics.mean(cold) * 1e6) / 3600
        print(
            f"threads {threads}: {n} files, {nbytes / 1e9:.2f} GB; cold {statistics.mean(cold):.0f} ± {sd:.0f} MB/s "
            f"({a.repeats} runs), warm {warm:.0f} MB/s; {a.project_gib:.0f} GiB at the cold rate: {hours:.2f} h"
        )


if __name__ == "__main__":
    main()
