"""Slice files of shapes that Table I does not have, for the tests that run the suite on them."""
from pathlib import Path


def text(name: str, vms: int, gpus: int, gpu: str = "T4", rtt_ms: float = 30) -> str:
    """`vms` VMs v0, v1, ... at sites S0, S1, ..., each with `gpus` GPUs of type `gpu`; no cores
    given, as a user's file may leave them out."""
    return f'name = "{name}"\nrtt_ms = {rtt_ms}\n' + "".join(
        f'[[vm]]\nname = "v{i}"\nsite = "S{i}"\ngpus = {gpus}\ngpu = "{gpu}"\n' for i in range(vms))


def write(folder: Path, name: str, vms: int, gpus: int) -> Path:
    path = folder / f"{name.lower()}.toml"
    path.write_text(text(name, vms, gpus))
    return path
