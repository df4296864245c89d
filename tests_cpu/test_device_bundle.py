"""tests_gpu/device_bundle.sh, the recipe that carries what the suite needs to a lent GPU machine:
its arguments and its failure before any work. (Building downloads Ray's 79 MB wheel and the
Debian packages: run `tests_gpu/device_bundle.sh build` by hand; the note of issue 15 has its size.)"""
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "tests_gpu" / "device_bundle.sh"


def test_usage_and_a_missing_bundle_are_one_line_errors(tmp_path):
    proc = subprocess.run([str(SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip() == f"usage: {SCRIPT} build|install [DIR]"
    proc = subprocess.run([str(SCRIPT), "install", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip() == (f"device_bundle: {tmp_path}/ray.tar.xz is missing: build the bundle first "
                                   f"and carry {tmp_path}")
