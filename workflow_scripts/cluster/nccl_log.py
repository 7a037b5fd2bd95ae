"""Which transport NCCL used, from its own initialisation lines (NCCL_DEBUG=INFO).

NCCL falls back to TCP sockets between nodes when it cannot load libibverbs, and says so only at
INFO level; a multi-node run then measures Ethernet and nothing else shows it. The launcher
(cluster/launcher.py --nccl-log-dir DIR) has every rank write its lines to DIR/nccl.<host>.<pid>.log;
this module reads them back:

    read_logs(DIR)                  -> what NCCL chose (dict), None where nothing was recorded
    describe(parsed)                -> one table cell, e.g. "NCCL 2.21.5: P2P/CUMEM/read (NVL) within a node"
    transport_problem(parsed, ...)  -> why the transport between nodes is wrong, or None

    python -m workflow_scripts.cluster.nccl_log DIR [--into RESULT.json [--key nccl]]

prints (or merges into a JSON file) what the logs say. Plain Python: it runs in every framework's
interpreter and on bare GPU hosts. The line formats are NCCL's (src/transport/{p2p,shm,net}.cc,
src/init.cc, src/graph/search.cc, src/transport/net_ib, src/misc/ibvsymbols.cc), matched loosely
so that the releases from 2.12 to 2.30 all parse: older ones write "nranks" and no nNodes, SHM's
channel has no connection index, 2.30 says "Count not open libibverbs.so" where earlier releases
say "Failed to open libibverbs.so[.1]", and a release may put a timestamp before the host.
"""

import argparse
import json
import re
import sys
from pathlib import Path

PATTERN = "nccl.*.log"
# INIT carries the version, communicator, channel (P2P/SHM/NET), network and libibverbs lines;
# GRAPH the link types of the rings and trees; ENV the variables NCCL itself read (NCCL_IB_DISABLE
# from the environment or /etc/nccl.conf). NET would add a line per connection and nothing needed.
DEBUG_SUBSYS = "INIT,ENV,GRAPH"
# Levels at which NCCL writes its INFO lines; anything else a user set (WARN, VERSION) is quieter.
VERBOSE_LEVELS = ("INFO", "TRACE")
FIX = (
    "install rdma-core, libibverbs1 and ibverbs-providers in the environment or container (envs/containers/"
    'dlscale-gpu.def does), or set NCCL_IB_DISABLE: "1" in config nccl_env to accept sockets deliberately'
)
EVIDENCE_LINES = 10

_PREFIX = re.compile(r"(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>-?\d+)\]\s*$")
_VERSION = re.compile(r"NCCL version (\S+)")
_COMM = re.compile(r"comm \S+ rank (\d+) nranks (\d+)(?: nnodes (\d+))?", re.I)
_CHANNEL = re.compile(
    r"Channel \d+(?:/\d+)? : (\d+)\[[^\]]*\] -> (\d+)\[[^\]]*\](?: \[(?:send|receive)\])? via (.+?)\s*$"
)
_COLLNET = re.compile(r"CollNet \d+(?:/\d+)? : \d+ \[(?:send|receive)\] via (COLLNET/.+?)\s*$")
_NET = re.compile(r"(NET|COLLNET)/(.+?)/\d+(?:\(\d+\))?(.*)$")
_PATTERN = re.compile(r"Pattern \d+, crossNic \d+, nChannels (\d+), .*?type (\w+)/(\w+)")
_NETWORK = re.compile(r"Using network (.+?)\s*$")
_NET_DEVICES = re.compile(r"NET/(\S+) ?: Using(.*)$")
_DEVICE = re.compile(r"\[\d+\]\s*([^\s\[\]{},;=]+)")
_OOB = re.compile(r"OOB (\S+)")
_IBVERBS = re.compile(r"(?:Failed to|Count not|Could not|Cannot) open \S*ibverbs", re.I)
_NO_IB = re.compile(r"NET/IB ?: No device found")
_IB_DISABLE = re.compile(r"NCCL_IB_DISABLE set by environment to (\S+?)\.?\s*$")
_NVLS = re.compile(r"NVLS multicast support is (not )?available")
_NET_FAILED = re.compile(r"Failed to initialize NET plugin (.+?)\s*$")


def _transport(token):
    """A channel's 'via' token without its peer-specific parts: (name, GPUDirect RDMA or None)."""
    net = _NET.match(token)
    if net:
        return f"{net.group(1)}/{net.group(2)}", "/GDRDMA" in net.group(3)
    # P2P/indirect/<rank>[<dev>] names the GPU it goes through: the same transport whichever it is
    return re.sub(r"/\d+\[[^\]]*\]", "", token), None


def _info_lines(path):
    """(host, message, the line verbatim) of each NCCL INFO line of one debug file."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return
    for line in text.splitlines():
        head, sep, msg = line.partition(" NCCL INFO ")
        if not sep:
            continue
        m = _PREFIX.search(head)
        yield (m.group("host") if m else ""), msg.strip(), line.strip()


def _empty():
    return {
        "files": 0,
        "lines": 0,
        "versions": [],
        "hosts": [],
        "ranks": None,
        "nodes": None,
        "nccl_nodes": None,
        "within_node": {},
        "between_nodes": {},
        "gdrdma": None,
        "link_types": {"intra": [], "inter": []},
        "network": [],
        "devices": {},
        "oob": [],
        "ibverbs_failed": None,
        "ib_no_device": None,
        "net_failed": [],
        "ib_disable": None,
        "nvls": None,
        "evidence": [],
    }


def _add(items, value):
    if value not in items:
        items.append(value)


class _Reading:
    """read_logs' record as its lines come: each line goes to the one field it speaks of, and the
    first line of each kind (up to EVIDENCE_LINES) is kept verbatim."""

    def __init__(self):
        self.out, self.channels, self.gdr, self.kinds = _empty(), [], [], set()

    def evidence(self, kind, line):
        if kind not in self.kinds and len(self.out["evidence"]) < EVIDENCE_LINES:
            self.kinds.add(kind)
            self.out["evidence"].append(line)

    def take(self, host, msg, line):
        out = self.out
        out["lines"] += 1
        if host:
            _add(out["hosts"], host)
        kind = self._setup(msg) or self._network(msg, line)
        if kind:
            self.evidence(kind, line)

    def _setup(self, msg):
        """The version, communicator, channel and graph lines; -> the line's kind, or None."""
        out = self.out
        if m := _VERSION.match(msg):
            _add(out["versions"], m.group(1))
            return "version"
        if m := _COMM.match(msg):
            out["ranks"] = max(out["ranks"] or 0, int(m.group(2)))
            if m.group(3):
                out["nccl_nodes"] = max(out["nccl_nodes"] or 0, int(m.group(3)))
            return "comm"
        if m := _CHANNEL.match(msg) or _COLLNET.match(msg):
            name, uses_gdr = _transport(m.group(m.lastindex))
            self.channels.append(name)
            if uses_gdr is not None:
                self.gdr.append(uses_gdr)
            return name
        if m := _PATTERN.match(msg):
            if int(m.group(1)) > 0:
                _add(out["link_types"]["intra"], m.group(2))
                _add(out["link_types"]["inter"], m.group(3))
            return "graph"
        return None

    def _network(self, msg, line):
        """The network's lines: what NCCL chose, used, could not load or was told; -> the kind."""
        out = self.out
        if m := _NETWORK.match(msg):
            _add(out["network"], m.group(1))
            return "network"
        if m := _NET_DEVICES.match(msg):
            used, _, oob = m.group(2).partition("; OOB")
            for dev in _DEVICE.findall(used):
                _add(out["devices"].setdefault(m.group(1), []), dev)
            if oob:
                _add(out["oob"], oob.strip())
            return f"devices {m.group(1)}"
        if _IBVERBS.search(msg):
            out["ibverbs_failed"] = out["ibverbs_failed"] or line
            return "ibverbs"
        if m := _NET_FAILED.match(msg):
            _add(out["net_failed"], m.group(1))
            return f"net failed {m.group(1)}"
        if _NO_IB.match(msg):
            out["ib_no_device"] = out["ib_no_device"] or line
            return "no ib"
        if m := _IB_DISABLE.match(msg):
            out["ib_disable"] = m.group(1)
            return "ib disable"
        if m := _NVLS.match(msg):
            out["nvls"] = bool(out["nvls"]) or not m.group(1)
        return None

    def result(self):
        out = self.out
        # The hosts the lines came from, not NCCL's nNodes: with P2P and SHM off NCCL counts each GPU
        # of one host as a node of its own.
        out["nodes"] = len(out["hosts"]) or out["nccl_nodes"]
        several = (out["nodes"] or 1) > 1
        for name in self.channels:
            between = several and name.startswith(("NET/", "COLLNET/"))
            side = out["between_nodes" if between else "within_node"]
            side[name] = side.get(name, 0) + 1
        out["gdrdma"] = any(self.gdr) if self.gdr else None
        return out


def read_logs(directory):
    """What NCCL's debug files in `directory` (nccl.*.log) say it chose, over all ranks; None where
    there is none (no NCCL in the run, or NCCL_DEBUG / NCCL_DEBUG_FILE set otherwise by the user).

    Keys: files, lines (NCCL INFO lines read), versions, hosts, ranks, nodes (the hosts that wrote
    lines; None where the logs do not say), nccl_nodes (NCCL's own nNodes), within_node and
    between_nodes ({transport: connections}; NET counts as between nodes only in a run over several
    nodes), gdrdma (True/False for the NET connections, None without any), link_types ({"intra":
    [...], "inter": [...]}: the GRAPH lines' path types, NVL, PIX, PXB, PHB, SYS...), network (what
    NCCL announced: "IB", "Socket", a plugin's name), devices ({"IB": [...], "Socket": [...]}: what
    each network said it uses), oob (IB's bootstrap interfaces), ibverbs_failed (NCCL's line saying
    libibverbs could not be loaded, else None), ib_no_device (its "NET/IB : No device found." line,
    else None), net_failed (the network plugins NCCL says it could not initialise, e.g. ["IB"], in
    releases that say so), ib_disable (NCCL_IB_DISABLE as NCCL read it, else None), nvls (NVLink
    SHARP available: True/False/None) and evidence (a few lines verbatim)."""
    files = sorted(Path(directory).glob(PATTERN)) if directory and Path(directory).is_dir() else []
    if not files:
        return None
    reading = _Reading()
    for path in files:
        for host, msg, line in _info_lines(path):
            reading.take(host, msg, line)
    return {**reading.result(), "files": len(files)}


def _short(version):
    return version.split("+")[0]


def _ib_disabled(parsed, env):
    """NCCL_IB_DISABLE as the run had it: the environment given, else what NCCL logged reading."""
    value = (env or {}).get("NCCL_IB_DISABLE") or (parsed or {}).get("ib_disable") or ""
    return value.strip() not in ("", "0")


def _sockets_chosen(parsed, env):
    """The user asked for sockets (NCCL_IB_DISABLE=1, or NCCL_NET=Socket)."""
    return _ib_disabled(parsed, env) or (env or {}).get("NCCL_NET", "").strip().lower() == "socket"


def _listing(counts):
    return ", ".join(sorted(counts, key=lambda k: -counts[k]))


def describe(parsed, env=None):
    """A table cell: the NCCL version and the transports within and between nodes, with the GRAPH
    link type, GPUDirect RDMA, and why sockets were used where the logs or `env` say."""
    if parsed is None:
        return "not recorded (no NCCL debug log)"
    versions = ", ".join(dict.fromkeys(_short(v) for v in parsed["versions"])) or "version unknown"
    parts = []
    if parsed["within_node"]:
        # LOC is a GPU's path to itself: no link between GPUs to name
        links = "/".join(t for t in parsed["link_types"]["intra"] if t != "LOC")
        parts.append(f"{_listing(parsed['within_node'])}{f' ({links})' if links else ''} within a node")
    if parsed["between_nodes"]:
        text = _listing(parsed["between_nodes"]) + (" GDRDMA" if parsed["gdrdma"] else "") + " between nodes"
        if "NET/Socket" in parsed["between_nodes"]:
            if _ib_disabled(parsed, env):
                text += " (InfiniBand off by choice: NCCL_IB_DISABLE=1)"
            elif (env or {}).get("NCCL_NET", "").strip().lower() == "socket":
                text += " (sockets by choice: NCCL_NET=Socket)"
            elif parsed["ibverbs_failed"]:
                text += " (libibverbs could not be loaded)"
        parts.append(text)
    if not parts:
        return f"NCCL {versions}: no transport lines in its log (NCCL_DEBUG_SUBSYS without INIT?)"
    return f"NCCL {versions}: " + "; ".join(parts)


def _active(port):
    state = (port.get("state") or "").upper()
    return not state or "ACTIVE" in state


def transport_problem(parsed, num_nodes, ib_devices, env=None):
    """A sentence saying why NCCL's transport between nodes is wrong, or None: sockets between
    nodes that have active InfiniBand (or RoCE) ports, unless the user chose sockets (env:
    NCCL_IB_DISABLE=1 or NCCL_NET=Socket, as the ranks had it). ib_devices: the nodes' ports as
    provenance.infiniband_ports() gives them (optionally with a "node" key each)."""
    if parsed is None or num_nodes <= 1 or "NET/Socket" not in parsed["between_nodes"]:
        return None
    ports = [p for p in ib_devices or [] if _active(p)]
    if not ports or _sockets_chosen(parsed, env):
        return None
    names = ", ".join(
        dict.fromkeys(
            (f"{p['node']}:" if p.get("node") else "") + f"{p['name']} port {p['port']} ({p.get('link_layer') or '?'})"
            for p in ports
        )
    )
    said = f"NCCL used TCP sockets (NET/Socket) between {num_nodes} nodes that have InfiniBand ports ({names})"
    if parsed["ibverbs_failed"]:
        return f"{said}: libibverbs could not be loaded where the ranks run (NCCL: {parsed['ibverbs_failed']!r})"
    if parsed["ib_no_device"] or "IB" in parsed["net_failed"]:
        hca = (env or {}).get("NCCL_IB_HCA")
        why = f", NCCL_IB_HCA={hca} may exclude them" if hca else ", e.g. no verbs provider for them"
        line = parsed["ib_no_device"] or next(e for e in parsed["evidence"] if "NET plugin IB" in e)
        return f"{said}: NCCL's IB transport found no usable device{why} (NCCL: {line!r})"
    return f"{said}; its log does not say why (see {PATTERN} and NCCL_IB_HCA / NCCL_NET)"


def debug_env(directory, env):
    """The variables that make each rank write its NCCL lines to `directory`: those the environment
    (with config nccl_env) does not set already, NCCL_DEBUG raised to INFO where a site set it
    quieter (its own lines then go to the same files: the transport is never left unrecorded by a
    site's module), and none where the log was sent elsewhere with NCCL_DEBUG_FILE. (variables, a
    note or None)."""
    level = env.get("NCCL_DEBUG", "").strip()
    if "NCCL_DEBUG_FILE" in env:
        return (
            {},
            f"the environment sets NCCL_DEBUG_FILE={env['NCCL_DEBUG_FILE']}: NCCL writes there, not to {directory}",
        )
    # NCCL expands %h and %p itself; a '%' of the folder's own name must reach it doubled.
    target = str(Path(directory).resolve()).replace("%", "%%") + "/nccl.%h.%p.log"
    wanted = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": DEBUG_SUBSYS, "NCCL_DEBUG_FILE": target}
    if level and level.upper() not in VERBOSE_LEVELS:
        return {**wanted, "NCCL_DEBUG_SUBSYS": env.get("NCCL_DEBUG_SUBSYS", DEBUG_SUBSYS)}, (
            f"the environment's NCCL_DEBUG={level} raised to INFO, NCCL's lines written to {directory}"
        )
    return {k: v for k, v in wanted.items() if k not in env}, None


def prepare(directory):
    """The folder exists (NCCL writes to stdout where it cannot open the file) and holds no debug
    file of an earlier run, which read_logs would mix with this one's."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob(PATTERN):
        old.unlink()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", help="the folder given to the launcher's --nccl-log-dir")
    ap.add_argument("--into", help="a JSON object file to add the result to (default: print it)")
    ap.add_argument("--key", default="nccl", help="the key it goes under in --into")
    a = ap.parse_args(argv)
    parsed = read_logs(a.directory)
    if not a.into:
        json.dump({"nccl": parsed, "describe": describe(parsed)}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    from ..common.atomic import write_json

    try:
        record = json.loads(Path(a.into).read_text())
    except (OSError, ValueError) as exc:
        sys.exit(f"nccl_log: {a.into}: cannot be read as JSON ({exc}); it is the file --into names")
    record[a.key] = parsed
    write_json(a.into, record)
    print(f"nccl_log: {a.into}: {a.key} = {describe(parsed)}", file=sys.stderr)


if __name__ == "__main__":
    main()
