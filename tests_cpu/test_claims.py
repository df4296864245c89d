"""The paper's claims on the emulated Table I slices with the CPU scale model (marker cpu): the suite
`python -m harness reproduce` runs, which ships with the package (harness/suite/emulated.py)."""
import pytest

from harness.suite.emulated import *  # noqa: F403 - its tests, fixtures and backend marker

# slow: trains every technique on emulated slices; the module's own mark names its backend
pytestmark = [pytest.mark.slow, pytestmark]  # noqa: F405
