"""The CPUs of a set grouped by physical core, from the kernel's topology (cluster.cpus counts
a rank's cores with it)."""

from pathlib import Path

CPU_ROOT = Path("/sys/devices/system/cpu")


def parse_cpu_list(text):
    """'0-3,8,10-11' (the kernel's list format) -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def core_groups(cpus, root=CPU_ROOT):
    """The CPUs in `cpus` grouped by physical core (hyperthread siblings together), ordered by their
    lowest CPU; a CPU whose topology the kernel does not show is a core of its own."""
    groups = {}
    for cpu in sorted(cpus):
        try:
            siblings = set(parse_cpu_list((root / f"cpu{cpu}/topology/thread_siblings_list").read_text()))
        except (OSError, ValueError):
            siblings = set()
        group = (siblings | {cpu}) & set(cpus)
        groups.setdefault(min(group), set()).update(group)
    return [sorted(g) for _, g in sorted(groups.items())]
