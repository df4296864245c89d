"""What a result was measured on: interpreter, package versions, devices, host."""
import importlib.metadata
import os
import platform
import socket

PACKAGES = ("jax", "jaxlib", "flax", "optax", "datasets", "tokenizers", "numpy", "ray")


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def describe() -> dict:
    import jax

    return {
        "python": platform.python_version(),
        "packages": {name: _version(name) for name in PACKAGES},
        "platform": jax.default_backend(),
        "devices": [f"{d.platform}:{d.id}:{d.device_kind}" for d in jax.devices()],
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
    }


def peak_tflops(dtype: str) -> float | None:
    """The device's peak for MFU, when it is a GPU the suite knows; None on CPU."""
    import jax

    from harness import hardware

    device = jax.devices()[0]
    accelerator = hardware.identify(device.device_kind) if device.platform == "gpu" else None
    return accelerator.peak_tflops(dtype) if accelerator else None
