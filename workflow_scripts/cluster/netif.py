"""The network the ranks of a run talk over, chosen once by the launcher on the first node: the
rendezvous is reached at its address there, and each node's ranks take their own interface on it
(node_interface): the one in the first node's subnet, whatever it is called there (eth0 on one node,
ens5f0 on another), for Horovod's Gloo (HOROVOD_GLOO_IFACE) and NCCL's and Gloo's own bootstraps.

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
SIOCGIFNETMASK = 0x891B
# RFC 5737's TEST-NET-1: routed by the default route; connecting a UDP socket sends nothing.
DEFAULT_ROUTE_PROBE = "192.0.2.1"
KEY = "training.network_interface"
NET_ROOT = "/sys/class/net"


class InterfaceError(Exception):
    pass


def is_loopback(ip):
    return ipaddress.ip_address(ip).is_loopback


def _ioctl_ipv4(name, request):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), request, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def ipv4_of(name):
    """The interface's (primary) IPv4 address, or None."""
    return _ioctl_ipv4(name, SIOCGIFADDR)


def interfaces():
    """{interface name: its IPv4 address or None} of this host."""
    return {name: ipv4_of(name) for _, name in socket.if_nameindex()}


def networks():
    """{interface name: its address with its prefix ('10.1.0.5/24')} of this host's interfaces that
    have an IPv4 address."""
    out = {}
    for name, ip in interfaces().items():
        mask = _ioctl_ipv4(name, SIOCGIFNETMASK) if ip else None
        if ip and mask:
            out[name] = str(ipaddress.ip_interface(f"{ip}/{mask}"))
    return out


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


# The launcher's variables that name the first node's interface, and what it gives every rank of a
# run across nodes so that each node's ranks put their own interface in its place (own_interface).
NODE_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
FIRST_IFACE, FIRST_NET, NAMED = "DLSCALE_NET_IFACE", "DLSCALE_NET_ADDR", "DLSCALE_NET_VARIABLES"
PEERS = "DLSCALE_NET_PEERS"  # the run's nodes, from a launcher outside them: each node routes to the others
HOROVOD_IFACE = "DLSCALE_GLOO_IFACE"  # the launcher's word for HOROVOD_GLOO_IFACE (rank_env.setup_horovod)


def first_node_env(iface, addr, names, nets=None):
    """For every rank: the first node's interface, its address with its prefix (its network), and
    the variables in `names` the launcher set to that interface."""
    nets = networks() if nets is None else nets
    return {FIRST_IFACE: iface, FIRST_NET: nets.get(iface, f"{addr}/32"), NAMED: ",".join(names)}


def peers_env(hosts, names):
    """For every rank, from a launcher that is not on the run's nodes: the nodes, and the variables
    in `names` that each node's ranks set to their own choice (own_interface)."""
    return {PEERS: ",".join(hosts), NAMED: ",".join(names)}


def node_interface(first_iface, first_net, nets=None, route=None):
    """(interface, its address, why) of this node for a run whose first node talks over
    `first_iface` at `first_net` ('10.1.0.5/24'): the interface in the same subnet (the first node's
    name where this node has it there too), else the one the route to the first node's address
    leaves by; None where neither is. nets, route: this host's networks() and route_source."""
    nets = networks() if nets is None else nets
    route = route or route_source
    first = ipaddress.ip_interface(first_net)
    mine = {n: ipaddress.ip_interface(a) for n, a in nets.items() if not ipaddress.ip_interface(a).ip.is_loopback}
    inside = sorted(n for n, a in mine.items() if a.ip in first.network)
    if inside:
        name = first_iface if first_iface in inside else inside[0]
        return name, str(mine[name].ip), f"in the first node's subnet {first.network}"
    src = route(str(first.ip))
    owner = {str(a.ip): n for n, a in mine.items()}
    if src in owner:
        return owner[src], src, f"the route to the first node's {first.ip}"
    return None


def _peers_interface(env, nets, route, resolve):
    """This node's interface towards the run's other nodes (PEERS), chosen here as the launcher
    chooses on a run's first node; None where none routes to them."""
    here = {socket.gethostname(), socket.gethostname().split(".")[0], env.get("SLURMD_NODENAME")}
    peers = [h for h in env[PEERS].split(",") if h and h not in here]
    addrs = {n: str(ipaddress.ip_interface(a).ip) for n, a in (nets or networks()).items()}
    try:
        return choose(peers, addrs=addrs, resolve=resolve, route=route)
    except InterfaceError:
        return None


def own_interface(env, nets=None, route=None, resolve=None):
    """On a rank of a run across nodes: the variables the launcher set to the first node's interface
    (NAMED, and Horovod's) set to this node's own (node_interface), in `env`. -> (interface, its
    address, why), or None where the launcher gave no first node (a run on one node, or none of
    this launcher's). Raises InterfaceError where this node has no way to the first node's network."""
    if FIRST_NET not in env and PEERS in env:
        found = _peers_interface(env, nets, route, resolve)
    elif FIRST_NET not in env:
        return None
    else:
        found = node_interface(env[FIRST_IFACE], env[FIRST_NET], nets, route)
    if found is None:
        where = f"{env[FIRST_NET]} ({env[FIRST_IFACE]} there)" if FIRST_NET in env else f"(the nodes {env[PEERS]})"
        raise InterfaceError(
            f"{socket.gethostname()} has no interface in the first node's network {where} and no "
            f"route to it: set config {KEY} to the interface the nodes share, or give this node a "
            f"route (interfaces here: {', '.join(f'{n}={a}' for n, a in sorted((nets or networks()).items()))})"
        )
    for name in filter(None, env.get(NAMED, "").split(",")):
        env[name] = f"={found[0]}" if name == "NCCL_SOCKET_IFNAME" else found[0]
    if HOROVOD_IFACE in env:
        env[HOROVOD_IFACE] = found[0]
    return found


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
