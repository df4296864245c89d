"""Slices as data: VMs, their sites and GPUs, and the network between them (TOML files).

The five slices of the paper's Table I ship in fixtures/slices/; users write their own in the
same form. Parsing validates everything and names the file and field of any error.
"""
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness import hardware
from harness.errors import BadInput

TABLE_I = Path(__file__).resolve().parent.parent / "fixtures" / "slices"
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


@dataclass(frozen=True)
class Slice:
    name: str
    network: str
    rtt_ms: float
    vms: tuple[VM, ...]
    source: str

    @property
    def gpus_per_vm(self) -> int:
        return self.vms[0].gpus


def _field(table: dict, key: str, kind, where: str, required: bool = True, default=None):
    if key not in table:
        if required:
            raise BadInput(f"{where}: missing field {key!r}")
        return default
    value = table[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) or not isinstance(value, kinds):
        expected = " or ".join(k.__name__ for k in kinds)
        raise BadInput(f"{where}: field {key!r} must be {expected}, got {value!r}")
    return value


def parse(text: str, source: str) -> Slice:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{source}: not valid TOML ({e})") from None
    name = _field(doc, "name", str, source)
    network = _field(doc, "network", str, source, required=False, default="unknown")
    rtt = _field(doc, "rtt_ms", (int, float), source)
    if rtt < 0:
        raise BadInput(f"{source}: field 'rtt_ms' must be >= 0, got {rtt}")
    vm_tables = _field(doc, "vm", list, source)
    if not vm_tables:
        raise BadInput(f"{source}: field 'vm' must list at least one VM")
    vms = []
    for i, t in enumerate(vm_tables):
        where = f"{source}: vm[{i}]"
        if not isinstance(t, dict):
            raise BadInput(f"{where}: must be a table ([[vm]])")
        gpus = _field(t, "gpus", int, where)
        if gpus < 1:
            raise BadInput(f"{where}: field 'gpus' must be >= 1, got {gpus}")
        gpu = _field(t, "gpu", str, where)
        if gpu not in hardware.ACCELERATORS:
            raise BadInput(f"{where}: field 'gpu' must be one of {', '.join(hardware.ACCELERATORS)}, got {gpu!r}")
        vms.append(VM(_field(t, "name", str, where, required=False, default=f"vm{i + 1}"),
                      _field(t, "site", str, where), gpus, gpu,
                      _field(t, "cores", int, where, required=False),
                      _field(t, "memory_gb", (int, float), where, required=False)))
    if len({vm.gpus for vm in vms}) != 1:
        raise BadInput(f"{source}: every VM must have the same number of GPUs (a mesh is hosts x devices)")
    if len({vm.name for vm in vms}) != len(vms):
        raise BadInput(f"{source}: VM names must be unique")
    return Slice(name, network, float(rtt), tuple(vms), source)


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
