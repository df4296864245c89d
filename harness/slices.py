"""Slices as data: VMs, their sites and GPUs, and the network between them (TOML files).

The five slices of the paper's Table I ship with the package (harness/resources/slices/); users write their own in the
same form, with any number of VMs and sites. `rtt_ms` is one RTT for every pair of VMs, or a
table with one entry per pair of sites ("UTAH-GPN" = 20.2; VMs at the same site default to
0.1 ms, an L2Bridge); `bandwidth_gbps` optionally caps every link. Parsing validates everything
(slice.schema.json, then what a schema cannot say) and names the file and field of any error.
"""
import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness import hardware, resources, schemas
from harness.errors import BadInput

TABLE_I = resources.path("slices")
TABLE_I_ORDER = ("TACC-TACC", "UTAH-GPN", "UTAH-MASS", "BRIS-STAR", "GAT-AMST")


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


@dataclass(frozen=True)
class Slice:
    name: str
    network: str
    rtt_ms: float  # the largest RTT between two of its VMs: the slice's figure in Table I
    vms: tuple[VM, ...]
    source: str
    site_rtt_ms: tuple = ()  # ((site_a, site_b, ms), ...) when given per pair of sites
    bandwidth_gbps: float | None = None

    @property
    def gpus_per_vm(self) -> int:
        return self.vms[0].gpus

    def rtt_between(self, a: str, b: str) -> float:
        """RTT in ms between the VMs named a and b."""
        site = {vm.name: vm.site for vm in self.vms}
        if not self.site_rtt_ms:
            return self.rtt_ms
        for x, y, ms in self.site_rtt_ms:
            if {x, y} == {site[a], site[b]}:
                return ms
        return SAME_SITE_RTT_MS


def parse(text: str, source: str) -> Slice:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{source}: not valid TOML ({e})") from None
    return from_document(doc, source)


def from_document(doc: dict, source: str) -> Slice:
    schemas.check(doc, "slice", source)  # fields, types and ranges: slice.schema.json
    name, rtt, bandwidth = doc["name"], doc["rtt_ms"], doc.get("bandwidth_gbps")
    vms = [VM(t.get("name", f"vm{i + 1}"), t["site"], t["gpus"], t["gpu"], t.get("cores"), t.get("memory_gb"))
           for i, t in enumerate(doc["vm"])]
    if len({vm.gpus for vm in vms}) != 1:
        raise BadInput(f"{source}: every VM must have the same number of GPUs (a mesh is hosts x devices)")
    if len({vm.name for vm in vms}) != len(vms):
        raise BadInput(f"{source}: VM names must be unique")
    site_rtt = ()
    if isinstance(rtt, dict):
        sites = {vm.site for vm in vms}
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
    sl = Slice(name, doc.get("network", "unknown"), float(rtt) if not site_rtt else 0.0, tuple(vms), source, site_rtt,
               None if bandwidth is None else float(bandwidth))
    if site_rtt:
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


def table_i() -> list[Slice]:
    return [load(name) for name in TABLE_I_ORDER]
