"""`python -m harness live provision|up|status|down`: a live slice made into the suite's cluster over SSH.

    python -m harness live provision --slice my-slice.toml   # optional: FABlib makes the slice, writes hosts.toml
    python -m harness live up hosts.toml          # checks, installs, measures, starts Ray; writes inventory.toml
    pytest -m fabric --slice-inventory inventory.toml
    python -m harness live down inventory.toml    # stops what up started, removes what it wrote

The hosts file: harness.backends.live.hosts. What up does, step by step: harness.backends.live.bringup.
"""
import argparse
import sys
import time
from pathlib import Path

from harness import toml_text
from harness.errors import BadInput
from harness.platform import inventory

HELP = ("make a FABRIC slice (provision), bring its VMs up as the suite's cluster over SSH (up), show it (status), "
        "stop it (down)")
DEFAULT_INVENTORY = "inventory.toml"


def add_arguments(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, help: str) -> argparse.ArgumentParser:
        a = actions.add_parser(name, help=help, description=help)
        # SUPPRESS: given after the action or before it (`live --json up`), --json is kept
        a.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                       help="print exactly one JSON document on stdout")
        return a

    up = action("up", "check every VM, install the harness, measure the links, start Ray, write the inventory")
    up.add_argument("hosts", metavar="HOSTS", help="the hosts file (TOML): how SSH reaches each VM")
    up.add_argument("--inventory", default=DEFAULT_INVENTORY, metavar="FILE",
                    help="where to write the inventory (default: %(default)s)")
    up.add_argument("--platform", choices=["gpu", "cpu"], default="gpu",
                    help="train on the VMs' GPUs, or on their CPUs standing in for the slice file's GPUs "
                         "(default: %(default)s)")
    up.add_argument("--wheel", default=None, metavar="FILE",
                    help="the harness wheel to install (default: built from this checkout)")
    up.add_argument("--strict-link", action="store_true",
                    help="stop (and bring everything down) if a pair is more than 5%% off the slice file's link")
    prov = action("provision", "create a FABRIC slice from a slice file (FABlib) and write the hosts file up reads")
    prov.add_argument("--slice", required=True, metavar="NAME|FILE", help="a Table I slice or a slice file")
    prov.add_argument("--hosts", default="hosts.toml", metavar="FILE",
                      help="where to write the hosts file (default: %(default)s)")
    prov.add_argument("--image", default=None, metavar="NAME", help="the VMs' FABRIC image (default: default_ubuntu_22)")
    prov.add_argument("--dry-run", action="store_true",
                      help="check the request against FABlib's offline lists and print it; no credentials, no FABRIC")
    for name, what in (("status", "show the cluster, its GPUs and the links measured by up"),
                       ("down", "stop everything up started on the VMs and remove their workdirs")):
        a = action(name, what)
        a.add_argument("inventory", nargs="?", default=DEFAULT_INVENTORY, metavar="INVENTORY",
                       help="the inventory up wrote (default: %(default)s)")


def run(args) -> tuple[int, dict]:
    return {"up": _up, "status": _status, "down": _down, "provision": _provision}[args.action](args)


def _hosts_of(path: str):
    from harness.backends.live import hosts  # deferred: asyncssh loads only for the live commands

    inv = inventory.load(path)
    if inv.hosts is None:
        raise BadInput(f"slice inventory {path}: field 'hosts' is missing (it was not written by `live up`)")
    return inv, hosts.load(inv.hosts)


def _up(args) -> tuple[int, dict]:
    # deferred: asyncssh and the bring-up load only for the live commands
    from harness.backends.live import bringup, hosts, links

    given = hosts.load(args.hosts)
    if args.wheel is not None and not Path(args.wheel).is_file():
        raise BadInput(f"--wheel: {args.wheel}: no such file")
    start = time.monotonic()
    doc = bringup.up(given, args.platform, args.wheel)
    off = links.flagged([links.Link.from_dict(d) for d in doc["link"]])
    for line in off:
        print(f"link off: {line}", file=sys.stderr)
    if off and args.strict_link:
        bringup.down(given)
        raise BadInput(f"--strict-link: {off[0]}" + (f" (and {len(off) - 1} more)" if len(off) > 1 else ""))
    Path(args.inventory).write_text(toml_text.dumps(doc))
    seconds = time.monotonic() - start
    print(f"up in {seconds:.0f} s; inventory: {args.inventory}", file=sys.stderr)
    return 0, {"inventory": str(Path(args.inventory).resolve()), "seconds": seconds, "links_off": off, **doc}


def _status(args) -> tuple[int, dict]:
    from harness.backends.driver_client import DriverClient  # deferred: as in _hosts_of
    from harness.backends.ray_clusters import driver_command

    inv = inventory.load(args.inventory)
    with DriverClient([], inv.ray_address, [vm.name for vm in inv.slice.vms], command=driver_command(inv)) as driver:
        nodes = driver.request({"do": "nodes"})
    found = {vm.name: next((n for n in nodes if vm.name in n["resources"]), None) for vm in inv.slice.vms}
    for vm in inv.slice.vms:
        node = found[vm.name]
        state = f"up, {node['resources'].get('GPU', 0):g} GPUs for Ray" if node else "NOT in the cluster"
        print(f"{vm.name} ({vm.site}): {state}", file=sys.stderr)
    for link in inv.links:
        print(f"{link['a']}-{link['b']}: RTT {link['rtt_ms']:.3f} ms, one flow "
              f"{link.get('bytes_per_s', 0) * 8e-9:.3g} Gbit/s{' OFF' if link.get('off') else ''}", file=sys.stderr)
    missing = [vm for vm, node in found.items() if node is None]
    return (1 if missing else 0), {"ray_address": inv.ray_address, "nodes": nodes, "missing": missing,
                                   "links": list(inv.links), "timeouts": inv.timeouts}


def _down(args) -> tuple[int, dict]:
    from harness.backends.live import bringup  # deferred: as in _hosts_of

    _, given = _hosts_of(args.inventory)
    stopped = bringup.down(given)
    Path(args.inventory).unlink(missing_ok=True)
    print(f"down: {sum(stopped)} processes stopped, workdirs removed", file=sys.stderr)
    return 0, {"stopped": {h.name: n for h, n in zip(given.hosts, stopped)}}


def _provision(args) -> tuple[int, dict]:
    from harness.backends.live import provision  # deferred: FABlib is an optional extra
    from harness.platform import slices

    sl = slices.load(args.slice)
    planned = provision.plan(sl, args.image or provision.IMAGE)
    for n in planned.nodes:
        print(f"{n.name}: {n.site}, {n.cores} cores, {n.ram_gb} GB RAM, {n.disk_gb} GB disk, {n.image}, "
              f"{n.gpus} x {n.gpu_model}", file=sys.stderr)
    print(f"networks: FABNetv4 at {', '.join(planned.networks)}", file=sys.stderr)
    if args.dry_run:
        return 0, {"dry_run": True, **planned.to_dict()}
    Path(args.hosts).write_text(provision.submit(planned, str(Path(sl.source).resolve()) if Path(sl.source).is_file()
                                                 else args.slice))
    print(f"hosts file: {args.hosts}; next: python -m harness live up {args.hosts}", file=sys.stderr)
    return 0, {"dry_run": False, "hosts": str(Path(args.hosts).resolve()), **planned.to_dict()}
