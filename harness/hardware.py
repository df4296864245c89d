"""Accelerators the suite knows: memory and peak dense throughput, from the vendors' data sheets.

Peaks are per device, without sparsity. "fp32" is plain FP32 (CUDA cores); "tensor" is the
16-bit tensor-core peak (FP16 on Turing, BF16/FP16 on Ampere and Hopper). MFU divides achieved
FLOP/s by the peak of the precision the run used; a CPU has no entry, so its MFU is left unset
unless the user gives a peak.
"""
from dataclasses import dataclass

from harness.errors import BadInput

GiB = 1024**3
GB = 1000**3


@dataclass(frozen=True)
class Accelerator:
    name: str
    memory_bytes: int
    peak_tflops_fp32: float
    peak_tflops_tensor: float
    source: str

    def peak_tflops(self, dtype: str) -> float:
        return self.peak_tflops_fp32 if dtype == "float32" else self.peak_tflops_tensor


ACCELERATORS = {
    a.name: a
    for a in [
        Accelerator("T4", 16 * GB, 8.1, 65.0, "NVIDIA T4 datasheet"),
        Accelerator("RTX6000", 24 * GB, 16.3, 130.5, "NVIDIA Quadro RTX 6000 datasheet"),
        Accelerator("A30", 24 * GB, 10.3, 165.0, "NVIDIA A30 datasheet"),
        Accelerator("A100-40GB", 40 * GB, 19.5, 312.0, "NVIDIA A100 datasheet"),
        Accelerator("H100", 80 * GB, 67.0, 989.0, "NVIDIA H100 SXM datasheet"),
        Accelerator("H200", 141 * GB, 67.0, 989.0, "NVIDIA H200 datasheet"),
    ]
}


def accelerator(name: str) -> Accelerator:
    try:
        return ACCELERATORS[name]
    except KeyError:
        raise BadInput(f"unknown GPU type {name!r}; expected one of {', '.join(ACCELERATORS)}") from None


def identify(device_kind: str) -> Accelerator | None:
    """Map a JAX device_kind string ('Tesla T4', 'NVIDIA H100 80GB HBM3', ...) to a known GPU."""
    kind = device_kind.upper().replace(" ", "")
    for key, names in {"T4": ["T4"], "RTX6000": ["RTX6000"], "A30": ["A30"],
                       "A100-40GB": ["A100"], "H100": ["H100"], "H200": ["H200"]}.items():
        if any(n in kind for n in names):
            return ACCELERATORS[key]
    return None
