"""Emulated slices need root, TUN and network namespaces, and on CPU a slice of mixed GPUs needs
a cgroup cpu controller (harness.backends.emulation.compute). Without them a test skips with the reason,
except in CI (CI set, as CI runs): CI runs as root, so their absence there is a failure, never a
suite that passes without its claims."""
import os

import pytest

from harness.backends.emulation import compute, netns


def require_emulation(mixed_gpus: bool = False) -> None:
    """mixed_gpus: the slices' VMs compute at different speeds (emulated on CPU)."""
    problem = netns.missing_privileges() or (compute.missing() if mixed_gpus else None)
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must emulate slices, but {problem}", pytrace=False)
    pytest.skip(f"cannot emulate slices here: {problem}")
