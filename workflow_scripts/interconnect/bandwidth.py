"""Bandwidth as NVIDIA's nccl-tests define it (doc/PERFORMANCE.md there), so our figures and
theirs sit side by side: algbw = bytes / time; busbw = algbw x a factor per collective that
makes it comparable with the link's speed whatever the number of ranks n (all-reduce moves
2 (n-1)/n of the message over each link, broadcast the message once). GB = 1e9 bytes."""

BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "broadcast": lambda n: 1.0,
}
COLLECTIVES = tuple(BUS_FACTOR)
ELEMENT_BYTES = 4  # float32, nccl-tests' default type


def algbw_GBps(nbytes, seconds):
    return nbytes / seconds / 1e9


def busbw_GBps(collective, nbytes, seconds, ranks):
    return algbw_GBps(nbytes, seconds) * BUS_FACTOR[collective](ranks)


def message_sizes(min_bytes, max_bytes):
    """min_bytes, 2 x min_bytes, ... up to max_bytes (nccl-tests' -b/-e with -f 2)."""
    if min_bytes < ELEMENT_BYTES or min_bytes % ELEMENT_BYTES:
        raise ValueError(f"min_bytes {min_bytes} is not a whole number of {ELEMENT_BYTES}-byte elements")
    if max_bytes < min_bytes:
        raise ValueError(f"max_bytes {max_bytes} is below min_bytes {min_bytes}")
    sizes = [min_bytes]
    while sizes[-1] * 2 <= max_bytes:
        sizes.append(sizes[-1] * 2)
    return sizes
