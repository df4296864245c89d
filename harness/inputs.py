"""Checks of the numbers and output paths a user gives the subcommands, made before any work.

Each raises BadInput naming the option and what was expected. A NaN fails every comparison, so
the number checks are written as `not value > 0`: NaN is refused rather than let through.
An output path is tried for real (folder made, file opened for appending) because a run that
cannot write its record finds out only after the training it was meant to record.
"""
import math
from pathlib import Path

from harness.errors import BadInput


def positive(option: str, value: float) -> float:
    if not (value > 0 and math.isfinite(value)):
        raise BadInput(f"{option} must be a positive number, got {value}")
    return value


def non_negative(option: str, value: float) -> float:
    if not (value >= 0 and math.isfinite(value)):
        raise BadInput(f"{option} must be a number >= 0, got {value}")
    return value


def appendable_file(option: str, path: str | Path) -> Path:
    """A file that records will be appended to: its folder is made and it is opened now."""
    path = Path(path)
    if path.is_dir():
        raise BadInput(f"{option} {path}: is a folder (expected a .jsonl file to append to)")
    _no_file_in_the_way(option, path, path.parent)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a"):
            pass
    except OSError as e:
        raise BadInput(f"{option} {path}: cannot write there ({e.strerror})") from None
    return path


def made_folder(option: str, path: str | Path) -> Path:
    path = Path(path)
    _no_file_in_the_way(option, path, path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInput(f"{option} {path}: cannot make the folder ({e.strerror})") from None
    return path


def _no_file_in_the_way(option: str, path: Path, folder: Path) -> None:
    """mkdir says only "File exists" when a file stands where a folder of the path should be."""
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise BadInput(f"{option} {path}: {existing} is a file, not a folder")


def run_folder(option: str, path: str | Path) -> Path:
    """A run folder written by reproduce (or a shipped baseline)."""
    path = Path(path)
    if not (path / "results.jsonl").is_file():
        raise BadInput(f"{option} {path}: no results.jsonl there (expected a run folder written by reproduce)")
    return path
