"""Ordered, bounded parallel map with a progress bar.

Threads, not processes: the work per item (file reads, Pillow decode/resize/encode) releases the
GIL, and threads avoid pickling ~110 KB of JPEG bytes per image between processes.
"""

import collections
import sys
from concurrent.futures import ThreadPoolExecutor

from tqdm import tqdm


def ordered_map(fn, items, workers, desc, unit="img"):
    """Yield fn(item) for each item, in input order, with at most a few items per worker in
    flight, so memory stays bounded whatever the dataset size."""
    items = list(items)
    window = max(1, workers) * 8
    bar = tqdm(
        total=len(items), desc=desc, unit=unit, file=sys.stderr, mininterval=0.5 if sys.stderr.isatty() else 10.0
    )
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        pending = collections.deque()
        it = iter(items)
        for item in it:
            pending.append(pool.submit(fn, item))
            if len(pending) >= window:
                break
        while pending:
            result = pending.popleft().result()
            nxt = next(it, None)
            if nxt is not None:
                pending.append(pool.submit(fn, nxt))
            bar.update(1)
            yield result
    bar.close()
