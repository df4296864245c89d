"""Emulated slices need root, TUN and network namespaces. Without them a test skips with the reason,
except in CI (CI set, as CI runs): CI runs as root, so their absence there is a failure, never a
suite that passes without its claims."""
import os

import pytest


def require_emulation() -> None:
    from harness.emulation import netns

    problem = netns.missing_privileges()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must emulate slices, but {problem}", pytrace=False)
    pytest.skip(f"cannot emulate slices here: {problem}")
