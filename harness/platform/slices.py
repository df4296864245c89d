"""Slices as data: VMs, their sites and GPUs, and the network between them (TOML files).

The five slices of the paper's Table I ship with the package (harness/resources/slices/); users write their own in the
same form, with any number of VMs and sites. `rtt_ms` is one round-trip time for every pair of
VMs, or a table with one entry per pair of sites ("UTAH-GPN" = 20.2; VMs at the same site default
to 0.1 ms, an L2Bridge); each direction gets half of it. What netem can do to a link can be set
for every link (`bandwidth_gbps`, `jitter_ms`, `jitter_distribution`, `loss_percent`,
`loss_gemodel`, `queue_packets`) and per direction between two sites in `[[link]]` tables, which
may also give that direction its own one-way `delay_ms` (an asymmetric path). Parsing validates
everything (slice.schema.json, then what a schema cannot say) and names the file and field of any
error; the bounds are the schema's.
"""
import dataclasses
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness import resources, schemas
from harness.errors import BadInput
from harness.platform import hardware

TABLE_I = resources.path("slices")
TABLE_I_ORDER = ("TACC-TACC", "UTAH-GPN", "UTAH-MASS", "BRIS-STAR", "GAT-AMST")
# The slice a one-slice command runs on when given none: the nearest two-site slice of Table I.
DEFAULT_SLICE = "UTAH-GPN"


@dataclass(frozen=True)
class VM:
    name: str
    site: str
    gpus: int
    gpu: str
    cores: int | None = None
    memory_gb: float | None = None

    @property
    def accelerator(self) -> hardware.Accelerator:
        return hardware.accelerator(self.gpu)


SAME_SITE_RTT_MS = 0.1  # TACC-TACC's L2Bridge in Table I
NETEM_LIMIT = 1000  # netem's default queue, in packets
UNCAPPED_GBPS = 10.0  # what an uncapped link is sized for: more than the delay link carries here
SMALLEST_FULL_PACKET = 1500  # bytes: the queue is counted in packets, sized for Ethernet's


def lossless_queue_packets(gbps: float | None, rtt_ms: float) -> int:
    """A queue that never overflows under TCP: netem's default, or twice the bandwidth-delay
    product in full Ethernet packets, whichever is larger (a flow's window is at most one BDP
    beyond the rate, and the link holds everything in flight)."""
    bdp = (gbps or UNCAPPED_GBPS) * 1e9 / 8 * rtt_ms / 1e3
    return max(NETEM_LIMIT, math.ceil(2 * bdp / SMALLEST_FULL_PACKET))


@dataclass(frozen=True)
class Shape:
    """What one direction of a link does to its packets, in netem's terms."""
    delay_ms: float  # one-way
    jitter_ms: float = 0.0
    jitter_distribution: str = "normal"  # uniform, normal or pareto; jitter reorders unless rate-capped
    loss_percent: float = 0.0  # independent (random) loss
    loss_gemodel: tuple | None = None  # Gilbert-Elliott (p, r, bad_loss, good_loss), percent
    bandwidth_gbps: float | None = None
    queue_packets: int | None = None  # None: lossless_queue_packets at the link's RTT

    @property
    def delay_only(self) -> bool:
        """Nothing here acts on single packets: no jitter, loss, rate or queue limit of its own."""
        return not (self.jitter_ms or self.loss_percent or self.loss_gemodel or self.bandwidth_gbps
                    or self.queue_packets)

    def limit(self, rtt_ms: float) -> int:
        return self.queue_packets or lossless_queue_packets(self.bandwidth_gbps, rtt_ms)

    def to_dict(self, rtt_ms: float) -> dict:
        """The settings as a record shows them (the queue resolved)."""
        out = dataclasses.asdict(self) | {"queue_packets": self.limit(rtt_ms)}
        if self.loss_gemodel:
            out["loss_gemodel"] = dict(zip(("p", "r", "bad_loss", "good_loss"), self.loss_gemodel))
        return out


SHAPE_FIELDS = ("bandwidth_gbps", "jitter_ms", "jitter_distribution", "loss_percent", "loss_gemodel", "queue_packets")


def _shape_fields(table: dict) -> dict:
    out = {k: table[k] for k in SHAPE_FIELDS if k in table}
    if "loss_gemodel" in out:
        g = out["loss_gemodel"]
        out["loss_gemodel"] = (float(g["p"]), float(g["r"]), float(g.get("bad_loss", 100.0)),
                               float(g.get("good_loss", 0.0)))
    return out


@dataclass(frozen=True)
class Slice:
    name: str
    network: str
    rtt_ms: float  # the largest RTT between two of its VMs: the slice's figure in Table I
    vms: tuple[VM, ...]
    source: str
    site_rtt_ms: tuple = ()  # ((site_a, site_b, ms), ...) when given per pair of sites
    bandwidth_gbps: float | None = None
    uniform_rtt_ms: float | None = None  # rtt_ms when given as one number for every pair
    link_defaults: tuple = ()  # (field, value) pairs of SHAPE_FIELDS set for every link
    directions: tuple = ()  # ((from_site, to_site, ((field, value), ...)), ...) from [[link]] tables
    same_site_rtt_ms: float = SAME_SITE_RTT_MS  # between VMs of one site that rtt_ms's table leaves out

    @property
    def gpus_per_vm(self) -> int:
        return self.vms[0].gpus

    def _site(self, vm: str) -> str:
        return next(v.site for v in self.vms if v.name == vm)

    def _symmetric_rtt(self, a: str, b: str) -> float:
        if self.uniform_rtt_ms is not None:
            return self.uniform_rtt_ms
        for x, y, ms in self.site_rtt_ms:
            if {x, y} == {self._site(a), self._site(b)}:
                return ms
        return self.same_site_rtt_ms

    def shape(self, a: str, b: str, rtt_ms: float | None = None) -> Shape:
        """The direction from VM a to VM b. rtt_ms replaces the slice's delays with rtt_ms / 2 each
        way (a latency sweep); the rest of the shape stays."""
        fields = dict(self.link_defaults) | {"bandwidth_gbps": self.bandwidth_gbps}
        delay = self._symmetric_rtt(a, b) / 2
        for x, y, given in self.directions:
            if (x, y) == (self._site(a), self._site(b)):
                given = dict(given)
                delay = given.pop("delay_ms", delay)
                fields |= given
        return Shape(delay_ms=delay if rtt_ms is None else rtt_ms / 2, **fields)

    @property
    def slowest_gbps(self) -> float | None:
        """The slowest rate set on a link between two of its VMs, a [[link]] table's where one
        sets it, else the slice's; None where no link has one. A ring's every edge carries the
        same bytes, so its slowest sets its pace."""
        rates = [self.shape(a.name, b.name).bandwidth_gbps for a in self.vms for b in self.vms if a is not b]
        return min((r for r in rates if r), default=self.bandwidth_gbps if len(self.vms) < 2 else None)

    def rtt_between(self, a: str, b: str) -> float:
        """Round-trip time in ms between the VMs named a and b: the delays of both directions."""
        return self.shape(a, b).delay_ms + self.shape(b, a).delay_ms

    @property
    def farthest_pair(self) -> tuple[str, str]:
        """The two VMs with the largest RTT between them: the pair whose RTT is the slice's."""
        pairs = [(a.name, b.name) for i, a in enumerate(self.vms) for b in self.vms[i + 1:]]
        return max(pairs, key=lambda pair: self.rtt_between(*pair))

    def with_rtt(self, rtt_ms: float) -> "Slice":
        """The slice with one RTT for every pair of VMs (half each way); the links keep the rest of their shape."""
        directions = tuple((x, y, tuple((k, v) for k, v in given if k != "delay_ms")) for x, y, given in self.directions)
        return dataclasses.replace(self, rtt_ms=rtt_ms, site_rtt_ms=(), uniform_rtt_ms=rtt_ms, directions=directions)

    def scaled_to(self, rtt_ms: float) -> "Slice":
        """The slice with its farthest pair at rtt_ms and every other delay scaled in proportion: a
        link made similar to the paper's keeps the slice's geography (VMs at one site stay close
        to each other, a nearer site stays nearer). A slice of no delay gets rtt_ms everywhere."""
        far = self.rtt_between(*self.farthest_pair) if len(self.vms) > 1 else 0.0
        if far <= 0 or (self.uniform_rtt_ms is not None and not self.directions):  # one RTT: nothing to keep
            return self.with_rtt(rtt_ms)
        k = rtt_ms / far
        directions = tuple((x, y, tuple((f, v * k if f == "delay_ms" else v) for f, v in given))
                           for x, y, given in self.directions)
        return dataclasses.replace(
            self, rtt_ms=rtt_ms, site_rtt_ms=tuple((x, y, ms * k) for x, y, ms in self.site_rtt_ms),
            uniform_rtt_ms=None if self.uniform_rtt_ms is None else self.uniform_rtt_ms * k,
            same_site_rtt_ms=self.same_site_rtt_ms * k, directions=directions)


def with_link_defaults(sl: Slice, **fields) -> Slice:
    """The slice with SHAPE_FIELDS set for every link (emulate's flags); [[link]] tables still win."""
    unknown = set(fields) - set(SHAPE_FIELDS)
    if unknown:
        raise ValueError(f"not link fields: {', '.join(sorted(unknown))}")
    given = {k: v for k, v in fields.items() if v is not None}
    doc = {"name": sl.name, "rtt_ms": 0.0, "vm": [{"site": "x", "gpus": 1, "gpu": "T4"}]} | given
    schemas.check(doc, "slice", "the command line")  # the bounds of a slice file's fields
    bandwidth = given.pop("bandwidth_gbps", sl.bandwidth_gbps)
    return dataclasses.replace(sl, link_defaults=tuple((dict(sl.link_defaults) | _shape_fields(given)).items()),
                               bandwidth_gbps=bandwidth)


def parse(text: str, source: str) -> Slice:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{source}: not valid TOML ({e})") from None
    return from_document(doc, source)


def from_document(doc: dict, source: str) -> Slice:
    schemas.check(doc, "slice", source)  # fields, types and ranges: slice.schema.json
    name, rtt, bandwidth = doc["name"], doc["rtt_ms"], doc.get("bandwidth_gbps")
    if isinstance(name, str) and name.endswith(".toml"):
        raise BadInput(f"{source}: field 'name' must not end in .toml (a name, not a file), got {name!r}")
    vms = [VM(t.get("name", f"vm{i + 1}"), t["site"], t["gpus"], t["gpu"], t.get("cores"), t.get("memory_gb"))
           for i, t in enumerate(doc["vm"])]
    for i, vm in enumerate(vms):
        if vm.gpus != vms[0].gpus:
            raise BadInput(f"{source}: field 'vm[{i}].gpus' must equal vm[0]'s {vms[0].gpus}: every VM has the same "
                           f"number of GPUs (a mesh is hosts x devices), got {vm.gpus}")
        if any(vm.name == other.name for other in vms[:i]):
            raise BadInput(f"{source}: field 'vm[{i}].name' repeats {vm.name!r}: VM names must be unique")
    sites = {vm.site for vm in vms}
    site_rtt = ()
    if isinstance(rtt, dict):
        for key in rtt:
            parts = key.split("-")
            if len(parts) != 2 or not set(parts) <= sites:
                raise BadInput(f"{source}: field 'rtt_ms': key {key!r} must be SITE-SITE with sites of this slice "
                               f"({', '.join(sorted(sites))})")
        site_rtt = tuple((*key.split("-"), float(ms)) for key, ms in rtt.items())
        for a in sorted(sites):
            for b in sorted(sites):
                if a < b and not any({x, y} == {a, b} for x, y, _ in site_rtt):
                    raise BadInput(f"{source}: field 'rtt_ms' has no RTT for sites {a} and {b} (add \"{a}-{b}\" = ms)")
    directions = []
    for i, table in enumerate(doc.get("link", [])):
        for end in ("from", "to"):
            if table[end] not in sites:
                raise BadInput(f"{source}: field 'link[{i}].{end}' must be a site of this slice "
                               f"({', '.join(sorted(sites))}), got {table[end]!r}")
        if any((x, y) == (table["from"], table["to"]) for x, y, _ in directions):
            raise BadInput(f"{source}: field 'link[{i}]' repeats the direction {table['from']} -> {table['to']}")
        given = _shape_fields(table) | ({"delay_ms": float(table["delay_ms"])} if "delay_ms" in table else {})
        directions.append((table["from"], table["to"], tuple(given.items())))
    uniform = None if isinstance(rtt, dict) else float(rtt)
    sl = Slice(name, doc.get("network", "unknown"), uniform or 0.0, tuple(vms), source, site_rtt,
               None if bandwidth is None else float(bandwidth), uniform,
               tuple((k, v) for k, v in _shape_fields(doc).items() if k != "bandwidth_gbps"), tuple(directions))
    if uniform is None or directions:
        sl = dataclasses.replace(sl, rtt_ms=max(sl.rtt_between(a.name, b.name) for a in vms for b in vms if a != b)
                                 if len(vms) > 1 else 0.0)
    return sl


def load(name_or_path: str) -> Slice:
    """A Table I slice by name (e.g. UTAH-GPN) or a slice file."""
    path = Path(name_or_path)
    if not path.suffix and (TABLE_I / f"{name_or_path}.toml").is_file():
        path = TABLE_I / f"{name_or_path}.toml"
    if not path.is_file():
        raise BadInput(f"slice {name_or_path!r} is neither a Table I slice ({', '.join(TABLE_I_ORDER)}) nor a file")
    return parse(path.read_text(), str(path))


def reference(sl: Slice) -> str:
    """How a report names the slice so that load() finds it again: a Table I slice by its name
    (the packaged file's path differs between installs), any other by its file."""
    return sl.name if Path(sl.source).resolve() == (TABLE_I / f"{sl.name}.toml").resolve() else sl.source


def across_vms(sl: Slice, purpose: str) -> Slice:
    """sl, if it has the two VMs or more that `purpose` compares runs across."""
    if len(sl.vms) < 2:
        raise BadInput(f"{sl.source}: slice {sl.name} has one VM, and {purpose}: give it two or more")
    return sl


def one_shape(chosen: list[Slice]) -> list[Slice]:
    """chosen, if they can share one emulated cluster: the same VMs with the same GPUs (only the
    links differ between them, as between Table I's slices)."""
    base = chosen[0]
    for sl in chosen[1:]:
        if [(vm.name, vm.gpus) for vm in sl.vms] != [(vm.name, vm.gpus) for vm in base.vms]:
            raise BadInput(f"slice {sl.name} ({sl.source}): one emulated run needs slices with the same VMs "
                           f"and GPUs per VM as {base.name}; run it on its own")
    return chosen


def table_i() -> list[Slice]:
    return [load(name) for name in TABLE_I_ORDER]
