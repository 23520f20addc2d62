"""``netio doctor [PEER]``: which RDMA device, port and GID netio would use, and why.

Lists every GID of every RDMA device with the reason it was taken or rejected
(RoCEv1, link-local, IPv6 vs IPv4 peer, not on the netdev of the route to PEER, port
down, MTU), the kernel's route to PEER, and whether pyverbs (the verbs backend) can be
imported. The same choice is what ``netio.open("verbs")`` makes.

Exit codes (netio's one table, ``netio --help``): 0 a usable GID exists and pyverbs
imports (the verbs backend will work); 1 found a problem: the kernel has no RDMA device
(use the soft backend, or create an rxe device: the hint says how), or every GID was
rejected (the reasons say why), or a GID is usable but pyverbs cannot be imported
(apt-get install python3-pyverbs; make install) — the verdict line and ``--json``'s
``verdict`` say which; 2 usage error (bad arguments, PEER does not resolve).
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import json
import socket
import sys
from pathlib import Path
from typing import Any

from netio.backends.gid import Route, RouteLookup, kernel_route, no_device_hint
from netio.cli.exit_codes import ExitCode
from netio.errors import BackendUnavailable

EXIT_OK = ExitCode.OK
EXIT_USAGE = ExitCode.USAGE
# Each "not usable" outcome is the one thing doctor alerts on: ExitCode.FOUND.
EXIT_NO_DEVICE = ExitCode.FOUND
EXIT_ALL_REJECTED = ExitCode.FOUND
EXIT_NO_PYVERBS = ExitCode.FOUND


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "doctor", help="explain which RDMA device/port/GID netio would use for a peer",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("peer", nargs="?", help="the peer's address or host name")
    parser.add_argument("--device", help="only this RDMA device (e.g. rxe0, mlx5_0)")
    parser.add_argument("--port", type=int, help="only this port")
    parser.add_argument("--gid-index", type=int, help="only this GID index")
    parser.add_argument("--mtu", type=int, choices=(256, 512, 1024, 2048, 4096),
                        help="the path MTU wanted, in bytes")
    parser.add_argument("--via", metavar="NETDEV[,SRC]",
                        help="assume the route to PEER leaves through NETDEV (from source "
                             "address SRC) instead of asking the kernel")
    parser.add_argument("--sysfs-root", default="/sys", help="sysfs root (default /sys)")
    parser.add_argument("--json", action="store_true", help="one JSON document")
    parser.set_defaults(func=run)


def _resolve(peer: str) -> str:
    try:
        return str(ipaddress.ip_address(peer.strip("[]")))
    except ValueError:
        pass
    infos = socket.getaddrinfo(peer, None, proto=socket.IPPROTO_TCP)
    return str(infos[0][4][0])


def _pyverbs_status() -> tuple[bool, str]:
    from netio.backends.verbs import _pyverbs

    try:
        _pyverbs()
    except BackendUnavailable as exc:
        return False, f"{exc.message} ({exc.hint})"
    import pyverbs

    return True, f"pyverbs importable ({Path(pyverbs.__file__ or '').parent})"


def run(args: argparse.Namespace) -> int:
    from netio.backends.verbs import describe_host, query_port_mtu

    peer_ip = None
    if args.peer:
        try:
            peer_ip = _resolve(args.peer)
        except (OSError, UnicodeError) as exc:
            print(f"netio doctor: peer {args.peer!r} does not resolve: {exc}", file=sys.stderr)
            return EXIT_USAGE
    sysfs = Path(args.sysfs_root)
    has_pyverbs, pyverbs_text = _pyverbs_status()
    port_mtu = query_port_mtu() if has_pyverbs and args.sysfs_root == "/sys" else None
    lookup: RouteLookup = kernel_route
    if args.via:
        netdev, _, src = args.via.partition(",")
        via = Route(netdev=netdev, src_ip=src)
        lookup = lambda _peer: via  # noqa: E731
    desc, route = describe_host(peer_ip, sysfs_root=sysfs, route_lookup=lookup,
                                device=args.device, port=args.port, gid_index=args.gid_index,
                                mtu_bytes=args.mtu, port_mtu=port_mtu)
    kernel_has_rdma = (sysfs / "class" / "infiniband").is_dir() and any(
        (sysfs / "class" / "infiniband").iterdir())
    if desc.device and has_pyverbs:
        code, verdict = EXIT_OK, f"usable: {desc.summary()}"
    elif desc.device:
        code, verdict = EXIT_NO_PYVERBS, (f"a GID is usable ({desc.summary()}) but the verbs "
                                          f"backend cannot load: {pyverbs_text}")
    elif not kernel_has_rdma:
        code, verdict = EXIT_NO_DEVICE, ("no RDMA device: " + no_device_hint(desc, sysfs,
                                                                              route))
    else:
        code, verdict = EXIT_ALL_REJECTED, ("no usable GID: "
                                            + no_device_hint(desc, sysfs, route))
    if args.json:
        doc = {"peer": args.peer, "peer_ip": peer_ip,
               "route": dataclasses.asdict(route) if route else None,
               "pyverbs": {"importable": has_pyverbs, "detail": pyverbs_text},
               "description": dataclasses.asdict(desc), "exit_code": code,
               "verdict": verdict}
        print(json.dumps(doc, indent=2))
        return code
    if peer_ip:
        where = (f"via {route.netdev}, source {route.src_ip or '?'}"
                 + (" (a local address)" if route.local else "")) if route else "no route"
        print(f"peer: {args.peer}" + (f" ({peer_ip})" if peer_ip != args.peer else "")
              + f": {where}")
    print(f"pyverbs: {pyverbs_text}")
    text = desc.text()
    if not desc.device:  # Description.summary() names only the backend then
        text = text.replace(f"chosen: {desc.summary()}", "chosen: none")
    print(text)
    print(f"verdict: {verdict}")
    return code
