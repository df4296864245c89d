"""Data the harness ships with its code, so that an installed copy needs no checkout:

    slices/      the five slices of the paper's Table I (TOML, see harness.platform.slices)
    wikipedia/   a 105-article English Wikipedia sample in the hub's schema (see its README)
    baselines/   committed `reproduce` runs that regression comparison reads by default
"""
from importlib import resources
from pathlib import Path


def path(*parts: str) -> Path:
    """A shipped file or folder on disk. The package is installed as files (never zipped), so
    the resource is its own path: datasets and the report readers need real folders."""
    return Path(str(resources.files(__name__).joinpath(*parts)))
