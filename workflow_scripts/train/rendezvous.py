"""Horovod's own Gloo rendezvous server, as horovodrun runs it, for workers that srun or the
local launcher start instead: initialised with horovodrun's slot plan, it prints its port and
serves until its standard input closes (the launcher holds the other end).

    python -m workflow_scripts.train.rendezvous --hosts n1,n2 --per-node 4

It runs with the framework's interpreter (or container), where Horovod is installed; the
launcher itself needs no Horovod.
"""

import argparse
import sys

from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
from horovod.runner.http.http_server import RendezvousServer


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", required=True, help="the run's nodes, comma-separated, in rank order")
    ap.add_argument("--per-node", type=int, required=True, help="workers per node")
    a = ap.parse_args()
    hosts = a.hosts.split(",")
    server = RendezvousServer(verbose=0)
    port = server.start()
    server.init(
        get_host_assignments(parse_hosts(",".join(f"{h}:{a.per_node}" for h in hosts)), len(hosts) * a.per_node)
    )
    print(port, flush=True)
    sys.stdin.read()
    server.stop()


if __name__ == "__main__":
    main()
