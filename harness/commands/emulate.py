"""`python -m harness emulate`: bring an emulated slice up, measure it against its targets, tear it down."""
import argparse
import itertools
import sys
import time

from harness.backends.emulation import netns
from harness.backends.emulation.network import (
    MECHANISMS,
    EmulatedNetwork,
    choose_mechanism,
    measure_rtt,
    measure_throughput,
    tcp_window_bytes,
)
from harness.backends.ray_nodes import RayCluster
from harness.errors import BadInput
from harness.platform import slices

HELP = "bring up an emulated slice (a network namespace per VM, delay on the packets), probe it, tear it down"
THROUGHPUT_SECONDS = 2.0  # long enough to leave TCP slow start behind at 100 ms


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--slice", default=slices.DEFAULT_SLICE, metavar="NAME|FILE",
                   help=f"a Table I slice ({', '.join(slices.TABLE_I_ORDER)}) or a slice file (default: %(default)s)")
    p.add_argument("--rtt", type=float, default=None, metavar="MS", help="one RTT for every pair instead of the slice's")
    p.add_argument("--transfer-s", type=float, default=THROUGHPUT_SECONDS, metavar="SECONDS",
                   help="how long each pair's bulk TCP transfer should last at window/RTT: it sends that many "
                        f"seconds' worth of bytes (default: {THROUGHPUT_SECONDS:g}, past slow start at 100 ms)")
    p.add_argument("--ray", action="store_true", help="also start a Ray node per VM and report the cluster")
    p.add_argument("--mechanism", default="auto", choices=MECHANISMS,
                   help="how delay is put on the packets (default: auto, netem where the kernel has sch_netem, "
                        "else the userspace delay link)")
    link = p.add_argument_group("every link, both ways (a slice file can set them per direction in [[link]] tables)")
    link.add_argument("--jitter", type=float, metavar="MS", help="delay jitter, one way (reorders packets unless rate-capped)")
    link.add_argument("--jitter-distribution", choices=("uniform", "normal", "pareto"), help="jitter's distribution (default: normal)")
    link.add_argument("--loss", type=float, metavar="PERCENT", help="random loss, each way")
    link.add_argument("--bandwidth", type=float, metavar="GBPS", help="rate cap")
    link.add_argument("--queue", type=int, metavar="PACKETS",
                      help="queue limit (netem's limit; default: twice the bandwidth-delay product, never below 1000)")


def run(args) -> tuple[int, dict]:
    sl = slices.load(args.slice)
    if args.rtt is not None and not 0 <= args.rtt <= 10000:
        raise BadInput(f"--rtt must be between 0 and 10000 ms, got {args.rtt}")
    if not 0.01 <= args.transfer_s <= 600:
        raise BadInput(f"--transfer-s must be between 0.01 and 600 seconds, got {args.transfer_s}")
    try:
        sl = slices.with_link_defaults(sl, jitter_ms=args.jitter, jitter_distribution=args.jitter_distribution,
                                       loss_percent=args.loss, bandwidth_gbps=args.bandwidth,
                                       queue_packets=args.queue)
    except BadInput as e:
        flags = {"jitter_ms": "--jitter", "jitter_distribution": "--jitter-distribution", "loss_percent": "--loss",
                 "bandwidth_gbps": "--bandwidth", "queue_packets": "--queue"}
        raise BadInput(next((str(e).replace(f"field {k!r}", v) for k, v in flags.items() if repr(k) in str(e)),
                            str(e))) from None
    problem = netns.missing_privileges()
    if problem:
        raise BadInput(problem)
    try:
        mechanism = choose_mechanism(args.mechanism)
    except netns.Unavailable as e:
        raise BadInput(str(e)) from None
    start = time.perf_counter()
    result = {"slice": sl.name, "mechanism": mechanism, "pairs": []}
    with EmulatedNetwork(sl, rtt_ms=args.rtt, mechanism=mechanism) as net:
        result["bring_up_s"] = time.perf_counter() - start
        result["vms"] = {vm: {"netns": net.netns[vm], "address": net.address[vm]} for vm in net.netns}
        window = tcp_window_bytes(net, sl.vms[0].name)
        for a, b in itertools.combinations(net.netns, 2):
            target = net.target_rtt_ms(a, b)
            print(f"probing {a} <-> {b} (target RTT {target} ms) ...", file=sys.stderr, flush=True)
            rtt = measure_rtt(net, a, b)
            predicted = window / max(target, 0.01) * 1e3
            nbytes = int(min(predicted, 1.5e9) * args.transfer_s)
            result["pairs"].append({"a": a, "b": b, "target_rtt_ms": target, "rtt_ms": rtt,
                                    "rtt_error_ms": rtt - target,
                                    "throughput_bytes_per_s": measure_throughput(net, a, b, nbytes),
                                    "window_over_rtt_bytes_per_s": predicted})
        result["tcp_window_bytes"] = window
        # What the link carries with no delay added: at a slice's RTT one flow is held to about its
        # window per round trip whatever the link carries (4 MiB over 20.2 ms: about 150 MB/s).
        print("probing one flow at no added delay ...", file=sys.stderr, flush=True)
        result["link_bytes_per_s"] = net.link_rate()
        result["links"], result["packets"] = net.settings(), net.counters()
        if args.ray:
            with RayCluster(net) as cluster:
                result["ray_nodes"] = cluster.drive({"do": "nodes"})
        teardown = time.perf_counter()
    result["teardown_s"] = time.perf_counter() - teardown
    if not args.json:
        print_report(result)
    return 0, result


def print_report(r: dict) -> None:
    print(f"slice {r['slice']} ({r['mechanism']} delay link): up in {r['bring_up_s']:.2f} s, "
          f"down in {r['teardown_s']:.2f} s; TCP window {r['tcp_window_bytes'] / 2**20:.1f} MiB; "
          f"one flow at no added delay {r['link_bytes_per_s'] / 1e6:.0f} MB/s")
    print(f"{'pair':12} {'target ms':>9} {'RTT ms':>8} {'error':>7} {'MB/s':>8} {'window/RTT':>10}")
    for p in r["pairs"]:
        print(f"{p['a'] + '-' + p['b']:12} {p['target_rtt_ms']:9.1f} {p['rtt_ms']:8.2f} {p['rtt_error_ms']:+7.2f} "
              f"{p['throughput_bytes_per_s'] / 1e6:8.1f} {p['window_over_rtt_bytes_per_s'] / 1e6:10.1f}")
    for key, s in r["links"].items():
        c = r["packets"][key]
        drops = {k.removeprefix("dropped_"): n for k, n in c.items() if k.startswith("dropped_") and n}
        print(f"link {key}: {s['delay_ms']:g} ms one way, jitter {s['jitter_ms']:g} ms ({s['jitter_distribution']}), "
              f"loss {s['loss_percent']:g}%{' + Gilbert-Elliott' if s['loss_gemodel'] else ''}, "
              f"rate {str(s['bandwidth_gbps']) + ' Gbit/s' if s['bandwidth_gbps'] else 'uncapped'}, "
              f"queue {s['queue_packets']} packets; {c.get('packets', 0)} packets, "
              f"dropped {', '.join(f'{n} ({k})' for k, n in drops.items()) or 'none'}")
    for n in r.get("ray_nodes", []):
        print(f"ray node {n['address']}: {', '.join(f'{k}={v:g}' for k, v in sorted(n['resources'].items()))}")
