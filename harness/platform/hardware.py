"""Accelerators the suite knows: memory and peak dense throughput, from the vendors' data sheets.

Peaks are per device, without sparsity. "fp32" is plain FP32 (CUDA cores); "tf32" is the
tensor-core TF32 peak of Ampere and Hopper (Turing has none); "tensor" is the 16-bit tensor-core
peak (FP16 on Turing, BF16/FP16 on Ampere and Hopper). MFU divides achieved FLOP/s by the peak of
the arithmetic the run used (`Accelerator.peak_for`): XLA runs float32 matmuls as TF32 on GPUs
that have it unless full precision is asked for (jax_default_matmul_precision = "highest"). A
CPU has no entry, so its MFU is left unset unless the user gives a peak.

Memory: a "16 GB" T4 or a "24 GB" RTX 6000 has 16 or 24 GiB (binary, as nvidia-smi counts MiB),
not 16e9 or 24e9 bytes. A program cannot use all of it: the paper's stack (Alpa on Ray) lets
XLA's allocator take XLA_MEMORY_FRACTION of each GPU, Alpa's default
(XLA_PYTHON_CLIENT_MEM_FRACTION = 0.9, alpa/global_env.py), and leaves the rest to the CUDA
context and the cuDNN/cuBLAS workspaces. A step fits a GPU when it needs at most `usable_bytes`.
(With ECC on, a T4 shows 15 GiB rather than 16; the data-sheet capacity is used here.)
"""
import re
from dataclasses import dataclass

from harness.errors import BadInput

GiB = 1024**3
GB = 1000**3
XLA_MEMORY_FRACTION = 0.9


@dataclass(frozen=True)
class Accelerator:
    name: str
    memory_bytes: int  # capacity, from the data sheet
    peak_tflops_fp32: float
    peak_tflops_tensor: float
    source: str
    peak_tflops_tf32: float | None = None  # dense TF32 tensor cores (Ampere, Hopper)

    def peak_tflops(self, dtype: str) -> float:
        return self.peak_tflops_fp32 if dtype == "float32" else self.peak_tflops_tensor

    def peak_for(self, dtype: str, full_fp32: bool = False) -> tuple[float, str]:
        """(peak TFLOP/s, the arithmetic it is the peak of) for a run in `dtype`: float32 matmuls
        run as TF32 where the GPU has it, unless full_fp32 (jax_default_matmul_precision highest)."""
        if dtype != "float32":
            return self.peak_tflops_tensor, dtype
        if self.peak_tflops_tf32 and not full_fp32:
            return self.peak_tflops_tf32, "tf32"
        return self.peak_tflops_fp32, "float32"

    @property
    def usable_bytes(self) -> int:
        """What one step may allocate on this GPU in the paper's stack."""
        return int(self.memory_bytes * XLA_MEMORY_FRACTION)

    def describe_memory(self) -> str:
        return f"{self.memory_bytes / GiB:.0f} GiB, {self.usable_bytes / GiB:.1f} GiB usable"


ACCELERATORS = {
    a.name: a
    for a in [
        Accelerator("T4", 16 * GiB, 8.1, 65.0, "NVIDIA T4 datasheet"),
        Accelerator("RTX6000", 24 * GiB, 16.3, 130.5, "NVIDIA Quadro RTX 6000 datasheet"),
        Accelerator("A30", 24 * GiB, 10.3, 165.0, "NVIDIA A30 datasheet", peak_tflops_tf32=82.0),
        Accelerator("A40", 48 * GiB, 37.4, 149.7, "NVIDIA A40 datasheet", peak_tflops_tf32=74.8),
        Accelerator("A100-40GB", 40 * GiB, 19.5, 312.0, "NVIDIA A100 datasheet", peak_tflops_tf32=156.0),
        Accelerator("A100-80GB", 80 * GiB, 19.5, 312.0, "NVIDIA A100 datasheet", peak_tflops_tf32=156.0),
        Accelerator("H100", 80 * GiB, 67.0, 989.0, "NVIDIA H100 SXM datasheet", peak_tflops_tf32=494.5),
        Accelerator("H100-PCIe", 80 * GiB, 51.2, 756.0, "NVIDIA H100 PCIe datasheet", peak_tflops_tf32=378.0),
        Accelerator("H200", 141 * GB, 67.0, 989.0, "NVIDIA H200 datasheet (141 GB, decimal)", peak_tflops_tf32=494.5),
    ]
}

# CUDA's device names (JAX's device_kind), matched on whole words, the most specific first. A name
# that only looks like a known GPU is another GPU, with other peaks and memory: it stays unknown
# (no MFU) rather than being measured against the wrong data sheet.
_DEVICE_KINDS = [
    (r"\bRTX 6000 ADA\b|\bNVL\b|\bGH200\b", None),  # Ada's RTX 6000; H100/H200 NVL; Grace Hopper
    (r"\bT4\b", "T4"),
    (r"\bRTX 6000\b", "RTX6000"),
    (r"\bA30\b", "A30"),
    (r"\bA40\b", "A40"),
    (r"\bA100\b.*\b80GB\b", "A100-80GB"),
    (r"\bA100\b", "A100-40GB"),
    (r"\bH100 PCIE\b", "H100-PCIe"),
    (r"\bH100\b", "H100"),
    (r"\bH200\b", "H200"),
]


def accelerator(name: str) -> Accelerator:
    try:
        return ACCELERATORS[name]
    except KeyError:
        raise BadInput(f"unknown GPU type {name!r}; expected one of {', '.join(ACCELERATORS)}") from None


def identify(device_kind: str) -> Accelerator | None:
    """The GPU of the table that a JAX device_kind ('Tesla T4', 'NVIDIA H100 80GB HBM3',
    'NVIDIA A100-SXM4-80GB', ...) names, or None."""
    kind = " ".join(device_kind.upper().replace("-", " ").split())
    for pattern, name in _DEVICE_KINDS:
        if re.search(pattern, kind):
            return ACCELERATORS[name] if name else None
    return None
