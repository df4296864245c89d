"""A live slice's hosts (TOML): how SSH reaches each VM, for `python -m harness live up`.

    slice = "my-slice.toml"           # optional: the slice file they must match (VMs, GPUs, links)
    user = "ubuntu"                   # defaults for every host; a host may override each
    key = "~/.ssh/fabric_slice_key"
    jump = "me_0000012345@bastion.fabric-testbed.net"   # FABRIC's bastion: VMs are reached through it
    jump_key = "~/.ssh/fabric_bastion_key"              # default: key
    known_hosts = "~/.ssh/known_hosts"                  # optional: check the VMs' host keys against it
    python = "python3"                                  # the interpreter the harness's venv is made from
    workdir = "/tmp/harness-live/{vm}"                  # where each VM keeps the venv, Ray's files, the token
    [[host]]
    name = "vm1"                      # default: the slice file's VM in the same place, else vm1, vm2, ...
    address = "2001:db8::1"           # where SSH connects
    data_address = "10.20.0.1"        # optional: where the other VMs reach it (FABNetv4); default address
    port = 22

Without known_hosts, the VMs' host keys are accepted unchecked, as FABlib does for new slices.
"""
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness import schemas
from harness.errors import BadInput
from harness.platform import slices

DEFAULT_WORKDIR = "/tmp/harness-live/{vm}"  # short: Ray's unix sockets must stay under 108 bytes


@dataclass(frozen=True)
class Target:
    """Where an SSH connection goes: [user@]address[:port]."""
    address: str
    port: int = 22
    user: str | None = None
    key: str | None = None

    @classmethod
    def parse(cls, text: str, key: str | None) -> "Target":
        user, _, rest = text.rpartition("@")
        if rest.startswith("["):
            address, _, port = rest[1:].partition("]")
            port = port.lstrip(":")
        else:
            address, _, port = rest.partition(":")
        return cls(address, int(port) if port else 22, user or None, key)

    def __str__(self) -> str:
        address = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.user + '@' if self.user else ''}{address}:{self.port}"


@dataclass(frozen=True)
class Host:
    name: str
    ssh: Target
    data_address: str
    python: str
    workdir: str
    jump: Target | None = None

    def __str__(self) -> str:
        return f"{self.name} ({self.ssh})"


@dataclass(frozen=True)
class Hosts:
    hosts: tuple[Host, ...]
    slice: slices.Slice | None  # what they must match, when the file names one
    known_hosts: str | None
    path: str

    @property
    def source(self) -> str:
        return f"hosts file {self.path}"

    def by_name(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)


def _path(value: str | None) -> str | None:
    return str(Path(value).expanduser()) if value else None


def load(path: str) -> Hosts:
    """The hosts file at path; BadInput (one line, naming the file and the field or host) unless
    it is well formed, names each host once and matches its slice file's VMs."""
    source = f"hosts file {path}"
    try:
        doc = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise BadInput(f"{source}: no such file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"{source}: not valid TOML ({e})") from None
    schemas.check(doc, "hosts", source)
    sl = None
    if "slice" in doc:
        given = doc["slice"]
        beside = Path(path).parent / given  # a relative slice file is read beside the hosts file
        try:
            sl = slices.load(str(beside) if beside.is_file() else given)
        except BadInput as e:
            raise BadInput(f"{source}: field 'slice': {e}") from None
        if len(sl.vms) != len(doc["host"]):
            raise BadInput(f"{source}: {len(doc['host'])} hosts, but slice {sl.name} has {len(sl.vms)} VMs")
    hosts = []
    for i, entry in enumerate(doc["host"]):
        def given(field, default=None):
            return entry.get(field, doc.get(field, default))
        name = entry.get("name") or (sl.vms[i].name if sl else f"vm{i + 1}")
        if sl and name != sl.vms[i].name:
            raise BadInput(f"{source}: field 'host[{i}].name' is {name!r}, but VM {i + 1} of slice {sl.name} "
                           f"is {sl.vms[i].name!r}")
        data_address = entry.get("data_address", entry["address"])
        if ":" in data_address:  # Ray's addresses are host:port, and so is the inventory's ray_address
            raise BadInput(f"{source}: host[{i}]: the VMs reach each other by IPv4 address or host name, got "
                           f"{data_address!r}: give data_address (on FABRIC, the FABNetv4 address)")
        key = _path(given("key"))
        jump = given("jump")
        hosts.append(Host(name=name, ssh=Target(entry["address"], entry.get("port", 22), given("user"), key),
                          data_address=data_address,
                          python=given("python", "python3"),
                          workdir=given("workdir", DEFAULT_WORKDIR).replace("{vm}", name),
                          jump=Target.parse(jump, _path(given("jump_key")) or key) if jump else None))
    _check_unique(hosts, source)
    return Hosts(tuple(hosts), sl, _path(doc.get("known_hosts")), str(Path(path).resolve()))


def _check_unique(hosts: list[Host], source: str) -> None:
    seen: dict = {}
    for i, h in enumerate(hosts):
        for what, value in (("name", h.name), ("address", (h.ssh.address, h.ssh.port, h.jump)),
                            ("data_address", h.data_address)):
            if (what, value) in seen:
                shown = f"{h.ssh}" if what == "address" else repr(value)
                raise BadInput(f"{source}: host[{i}] and host[{seen[what, value]}] are one host "
                               f"(the same {what.replace('_', ' ')} {shown})")
            seen[what, value] = i
