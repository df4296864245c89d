"""A live slice's links, measured between every pair of VMs and held against the slice file.

Each pair gets its RTT, the minimum of PROBES UDP echoes (the statistic ping reports and every RTT
in the suite is), and the steady rate of one TCP flow (harness.backends.emulation.probe, run by
the VMs' harness venvs over SSH). A figure more than TOLERANCE off the slice file's is flagged:
the slice a user asked for is not the one the trials ran on, and every record and claims.md say so.

The timeouts that decide a VM is lost are scaled to the slowest measured RTT (timeouts()).
"""
import json
import shlex
from dataclasses import asdict, dataclass, field

from harness.backends.emulation.probe import PROBES
from harness.backends.live.ssh import HostError
from harness.platform.slices import Slice
from harness.progress import say

TOLERANCE = 0.05
ECHO_PORT, SINK_PORT = 47011, 47012
FLOW_BYTES = 256 * 2**20  # the second half, past slow start, is timed: seconds on a 25 Gbit/s link


@dataclass
class Link:
    a: str
    b: str
    rtt_ms: float
    bytes_per_s: float | None  # one TCP flow from a to b, steady
    expected_rtt_ms: float | None = None
    expected_bytes_per_s: float | None = None
    off: list[str] = field(default_factory=list)  # what is more than TOLERANCE off, in words

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict) -> "Link":
        return cls(**d)


def held_against(links: list[Link], sl: Slice | None) -> list[Link]:
    """The links with the slice file's figures beside them, and what is off flagged."""
    for link in links:
        link.off = []
        if sl is None:
            continue
        link.expected_rtt_ms = sl.rtt_between(link.a, link.b)
        gbps = sl.shape(link.a, link.b).bandwidth_gbps
        link.expected_bytes_per_s = gbps * 1e9 / 8 if gbps else None
        for what, got, want, unit, scale in (("RTT", link.rtt_ms, link.expected_rtt_ms, "ms", 1.0),
                                             ("one flow's rate", link.bytes_per_s, link.expected_bytes_per_s,
                                              "Gbit/s", 8e-9)):
            if want is None:
                continue
            if got is None:  # a figure the slice file gives and the probe could not measure is not "within"
                link.off.append(f"{link.a}-{link.b}: {what} not measured, the slice file gives {want * scale:.4g} {unit}")
            elif abs(got - want) > TOLERANCE * want:
                link.off.append(f"{link.a}-{link.b}: {what} {got * scale:.4g} {unit} measured, the slice file "
                                f"gives {want * scale:.4g} ({(got / want - 1) * 100:+.0f}%)"
                                if want else f"{link.a}-{link.b}: {what} {got * scale:.4g} {unit}, the slice file gives 0")
    return links


def flagged(links: list[Link]) -> list[str]:
    return [line for link in links for line in link.off]


# Ray declares a node dead after health_check_failure_threshold missed checks, each allowed
# health_check_timeout_ms. A check is one gRPC round trip, but it queues behind the collectives'
# bulk traffic on the same path (up to a window of it, an RTT or two more) and TCP's retransmission
# timer is 200 ms plus the RTT: at cross-continent RTTs Ray's defaults (3 s period, 10 s timeout)
# leave too few round trips, and users report nodes marked dead there. The scaled values keep at
# least RTTS_PER_TIMEOUT round trips per timeout and never go below Ray's or JAX's defaults.
RTTS_PER_TIMEOUT = 100
RAY_PERIOD_MS, RAY_TIMEOUT_MS = 3000, 10000
JAX_HEARTBEAT_S = 30  # harness.backends.worker.HEARTBEAT_S


def timeouts(links: list[Link]) -> dict:
    rtt = max((link.rtt_ms for link in links), default=0.0)
    scaled_ms = RTTS_PER_TIMEOUT * rtt
    return {"based_on_rtt_ms": rtt,
            "ray_health_check_period_ms": int(max(RAY_PERIOD_MS, scaled_ms / 3)),
            "ray_health_check_timeout_ms": int(max(RAY_TIMEOUT_MS, scaled_ms)),
            "heartbeat_s": int(max(JAX_HEARTBEAT_S, 3 * scaled_ms / 1000))}


def ray_environment(t: dict) -> dict[str, str]:
    """What every Ray node's environment carries so that its GCS and raylets use the timeouts."""
    return {"RAY_health_check_period_ms": str(t["ray_health_check_period_ms"]),
            "RAY_health_check_timeout_ms": str(t["ray_health_check_timeout_ms"])}


async def measure(opened: list, python_of) -> list[Link]:
    """Every pair of the sessions' VMs, one pair at a time (two flows at once would share the
    path); python_of(session) is the VM's harness interpreter."""
    links = []
    for i, server in enumerate(opened):
        for client in opened[:i]:
            probe = f"{shlex.quote(python_of(client))} -m harness.backends.emulation.probe"
            there = server.host.data_address
            async with _serving(server, python_of(server), "echo", ECHO_PORT):
                result = await client.run(f"{probe} ping {shlex.quote(there)} {ECHO_PORT} {PROBES}",
                                          f"measuring the RTT to {server.host.name}", timeout=120)
                rtts = json.loads(result.stdout)["rtt_ms"]
            async with _serving(server, python_of(server), "sink", SINK_PORT):
                result = await client.run(f"{probe} send {shlex.quote(there)} {SINK_PORT} {FLOW_BYTES}",
                                          f"measuring one flow to {server.host.name}", timeout=600)
                flow = json.loads(result.stdout)
            if not rtts:
                raise HostError(client.host, f"every RTT probe to {server.host.name} was lost")
            link = Link(client.host.name, server.host.name, min(rtts), flow["steady_bytes_per_s"])
            say(f"{link.a}-{link.b}: RTT {link.rtt_ms:.3f} ms, one flow "
                f"{(link.bytes_per_s or 0) * 8e-9:.3g} Gbit/s")
            links.append(link)
    return links


class _serving:
    """A probe server on a VM for the duration of a block: started, waited for, stopped."""

    def __init__(self, session, python: str, mode: str, port: int):
        self.session, self.python, self.mode, self.port = session, python, mode, port

    async def __aenter__(self):
        addr = shlex.quote(self.session.host.data_address)
        command = f"exec {shlex.quote(self.python)} -m harness.backends.emulation.probe {self.mode} {addr} {self.port}"
        self.process = await self.session.conn.create_process(command)
        line = await self.process.stdout.readline()
        if line.strip() != "ready":
            said = (await self.process.stderr.read()).strip().splitlines()
            raise HostError(self.session.host, f"the link probe's {self.mode} server did not start: "
                                               f"{said[-1] if said else 'no output'}")
        return self

    async def __aexit__(self, *exc):
        self.process.close()  # closing the channel leaves the process running: it is stopped by name
        await self.session.run(f"{shlex.quote(self.python)} -m harness.backends.live.remote stop "
                               f"{shlex.quote(self.session.host.workdir)} {self.mode}",
                               f"stopping the link probe's {self.mode} server")
