"""What a result was measured on: interpreter, package versions, devices, host."""
import functools
import importlib.metadata
import os
import platform
import socket

import jax

from harness.platform import hardware

PACKAGES = ("jax", "jaxlib", "flax", "optax", "datasets", "tokenizers", "numpy", "ray")


@functools.cache  # every record describes its environment; reading package metadata is slow
def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def describe() -> dict:
    return {
        "python": platform.python_version(),
        "packages": {name: _version(name) for name in PACKAGES},
        "platform": jax.default_backend(),
        "devices": [f"{d.platform}:{d.id}:{d.device_kind}" for d in jax.devices()],
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
    }


def peak(dtype: str, full_fp32: bool | None = None) -> tuple[float | None, str | None]:
    """(the device's peak TFLOP/s for MFU, the arithmetic it is the peak of: float32, tf32,
    bfloat16, float16), when it is a GPU the suite knows; (None, None) on CPU. Full-precision float32
    is what jax_default_matmul_precision = "highest" asks for; full_fp32=None reads that setting here."""

    device = jax.devices()[0]
    accelerator = hardware.identify(device.device_kind) if device.platform == "gpu" else None
    if accelerator is None:
        return None, None
    if full_fp32 is None:
        full_fp32 = jax.config.jax_default_matmul_precision in ("highest", "float32")
    return accelerator.peak_for(dtype, full_fp32=full_fp32)
