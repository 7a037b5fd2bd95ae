"""The one network interface the ranks of a run talk over, chosen once by the launcher on the
first node: Horovod's Gloo binds to it on every node (HOROVOD_GLOO_IFACE), the rendezvous is
reached at its address, and NCCL's and Gloo's own bootstraps are pointed at it.

A host name is not a safe guide: Debian's /etc/hosts maps a machine's own name to 127.0.1.1, so
the route to node 0's name, taken on node 0, is the loopback, which no other node can reach.
The choice therefore follows the route to another node of the run (else the default route) and
never returns a loopback interface for a run of several nodes. Standard library only: the
launcher runs in the workflow's interpreter.
"""

import fcntl
import ipaddress
import socket
import struct
from pathlib import Path

SIOCGIFADDR = 0x8915
# RFC 5737's TEST-NET-1: routed by the default route; connecting a UDP socket sends nothing.
DEFAULT_ROUTE_PROBE = "192.0.2.1"
KEY = "training.network_interface"
NET_ROOT = "/sys/class/net"


class InterfaceError(Exception):
    pass


def is_loopback(ip):
    return ipaddress.ip_address(ip).is_loopback


def ipv4_of(name):
    """The interface's (primary) IPv4 address, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def interfaces():
    """{interface name: its IPv4 address or None} of this host."""
    return {name: ipv4_of(name) for _, name in socket.if_nameindex()}


def resolve(host):
    """The IPv4 addresses a host name resolves to here ([] if it does not)."""
    try:
        return list(dict.fromkeys(a[4][0] for a in socket.getaddrinfo(host, None, socket.AF_INET)))
    except OSError:
        return []


def route_source(ip):
    """The local address the kernel would send from to reach `ip`, or None without a route."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((ip, 9))
        except OSError:
            return None
        return s.getsockname()[0]


def choose(peers, override="auto", addrs=None, resolve=None, route=None):
    """(interface, its IPv4 address, why) for a run whose other nodes are `peers` (host names;
    none for a run on this node only). override: config training.network_interface. addrs,
    resolve, route: this host's interfaces, resolver and routing (the functions above) unless given."""
    addrs = interfaces() if addrs is None else addrs
    resolve = resolve or globals()["resolve"]
    route = route or route_source
    if override != "auto":
        if override not in addrs:
            raise InterfaceError(
                f"config {KEY} = {override!r}: no such interface on {socket.gethostname()} "
                f"(it has {', '.join(sorted(addrs))})"
            )
        if not addrs[override]:
            raise InterfaceError(f"config {KEY} = {override!r}: the interface has no IPv4 address")
        return override, addrs[override], f"config {KEY}"
    owner = {ip: name for name, ip in addrs.items() if ip}
    if not peers:
        # Every rank is on this host: the loopback reaches them all and needs no network.
        lo = next((name for ip, name in owner.items() if is_loopback(ip)), "lo")
        return lo, "127.0.0.1", "one node"
    for peer in peers:
        for ip in resolve(peer):
            src = None if is_loopback(ip) else route(ip)
            if src and not is_loopback(src) and src in owner:
                return owner[src], src, f"the route to {peer} ({ip})"
    src = route(DEFAULT_ROUTE_PROBE)
    if src and not is_loopback(src) and src in owner:
        return owner[src], src, "the default route"
    raise InterfaceError(
        f"no interface with a non-loopback IPv4 address routes to the run's other nodes "
        f"({', '.join(peers)}), and there is no default route: set config {KEY} to the "
        f"interface the nodes share (interfaces here: "
        f"{', '.join(f'{n}={ip}' for n, ip in sorted(addrs.items()))})"
    )


def chosen(env):
    """The interface the launcher gave the ranks (its exact '=name' form), or None: none given (one
    node left to NCCL and Gloo), or a site's prefix or exclusion list, which names no one interface."""
    value = env.get("NCCL_SOCKET_IFNAME") or env.get("GLOO_SOCKET_IFNAME") or ""
    name = value[1:] if value.startswith("=") else value
    return name if name and not any(c in name for c in ",^") else None


def link_speed(name, root=NET_ROOT):
    """The link speed in Mb/s its driver reports (a bond: its ports' sum), or None where it reports
    none (down, a bridge, most virtual machines' NICs)."""
    try:
        speed = int((Path(root) / name / "speed").read_text())
    except (OSError, ValueError):
        return None
    return speed if speed > 0 else None


def faster_up(name, addrs, root=NET_ROOT):
    """[(interface, Mb/s)] of the host's other interfaces that are up, have an IPv4 address to talk
    over and a faster link than `name`'s, fastest first; [] where `name`'s speed is not reported."""
    mine = link_speed(name, root)
    if mine is None:
        return []
    out = []
    for other, ip in addrs.items():
        if other == name or not ip or is_loopback(ip):
            continue
        try:
            up = (Path(root) / other / "operstate").read_text().strip() == "up"
        except OSError:
            up = False
        speed = link_speed(other, root)
        if up and speed and speed > mine:
            out.append((other, speed))
    return sorted(out, key=lambda x: -x[1])


def gbps(mbps):
    return "speed not reported" if mbps is None else f"{mbps / 1000:g} Gb/s"


def describe(env, addrs=None, root=NET_ROOT):
    """What a run records of its socket interface: {name, speed_mbps, faster_up}; {} where the
    launcher named none."""
    name = chosen(env)
    if name is None:
        return {}
    addrs = interfaces() if addrs is None else addrs
    return {"name": name, "speed_mbps": link_speed(name, root), "faster_up": dict(faster_up(name, addrs, root))}
