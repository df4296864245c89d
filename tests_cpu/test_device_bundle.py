"""tests_gpu/device_bundle.sh, the recipe that carries what the suite needs to a lent GPU machine:
its arguments, its failure before any work, and its install on a small bundle of the same shape.
(Building downloads Ray's 79 MB wheel and the Debian packages: run `tests_gpu/device_bundle.sh
build` by hand; the note of issue 15 has its size.)"""
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import zipfile
from importlib.metadata import entry_points
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "tests_gpu" / "device_bundle.sh"
LOADER = Path("/lib64/ld-linux-x86-64.so.2")


def test_usage_and_a_missing_bundle_are_one_line_errors(tmp_path):
    proc = subprocess.run([str(SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip() == f"usage: {SCRIPT} build|install [DIR]"
    proc = subprocess.run([str(SCRIPT), "install", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip() == (f"device_bundle: {tmp_path}/ray.tar.xz is missing: build the bundle first "
                                   f"and carry {tmp_path}")


def _small_bundle(root: Path, tools=("ip", "tc")) -> Path:
    """A bundle laid out as `build` lays it out: an unpacked package with an executable in
    ray.tar.xz, a wheel, and an iproute2 .deb whose tools are a real ELF program (env, so that
    running one shows the environment it got)."""
    bundle = root / "bundle"
    (bundle / "wheels").mkdir(parents=True)
    (bundle / "debs").mkdir()
    unpacked = root / "unpacked" / "probe_ray"
    unpacked.mkdir(parents=True)
    (unpacked / "__init__.py").write_text("")
    (unpacked / "server").write_text("#!/bin/sh\necho serving\n")
    (unpacked / "server").chmod(0o755)
    with tarfile.open(bundle / "ray.tar.xz", "w:xz") as tar:
        tar.add(unpacked, arcname="probe_ray")
    with zipfile.ZipFile(bundle / "wheels" / "probe_wheel-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("probe_wheel/__init__.py", "WHO = 'the bundle'\n")
        wheel.writestr("probe_wheel-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: probe-wheel\nVersion: 1.0\n")
        wheel.writestr("probe_wheel-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr("probe_wheel-1.0.dist-info/RECORD", "")
    package = root / "iproute2"
    (package / "DEBIAN").mkdir(parents=True)
    (package / "DEBIAN" / "control").write_text("Package: iproute2\nVersion: 0.1\nArchitecture: amd64\n"
                                                "Maintainer: suite <suite@localhost>\nDescription: test stand-in\n")
    for tool, folder in zip(tools, ("bin", "sbin")):
        (package / folder).mkdir(exist_ok=True)
        shutil.copy2(shutil.which("env"), package / folder / tool)
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(package), str(bundle / "debs" / "iproute2.deb")],
                   check=True, capture_output=True)
    return bundle


def _plain_env() -> dict:
    """This environment without a library or Python path of its own, so that what appears is the bundle's."""
    return {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH")}


def _install(bundle: Path, cwd: Path, python_dir: Path | None = None) -> subprocess.CompletedProcess:
    """python_dir: where the python3 it runs is, if not this environment's."""
    env = _plain_env()
    env["DEVICE_BUNDLE_PREFIX"] = str(cwd / "installed here")  # a space, which the exports must survive
    if python_dir:
        env["PATH"] = f"{python_dir}:{env['PATH']}"
    return subprocess.run([str(SCRIPT), "install", str(bundle)], capture_output=True, text=True, cwd=cwd, env=env)


needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None or shutil.which("dpkg") is None,
                                reason="dpkg-deb and dpkg are needed to make and unpack the test's .deb")
needs_loader = pytest.mark.skipif(platform.machine() != "x86_64" or not LOADER.exists(),
                                  reason=f"the bundle's tools run through {LOADER} (x86-64 glibc)")


@needs_dpkg
@needs_loader
def test_install_puts_the_bundle_first_and_keeps_its_libraries_from_what_ip_starts(tmp_path):
    bundle = _small_bundle(tmp_path)
    for _ in range(2):  # a warm machine keeps the installed tree: the second install must match the first
        proc = _install(bundle, tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "already exists" not in proc.stderr
    exports = proc.stdout
    assert "LD_LIBRARY_PATH" not in exports
    assert (tmp_path / "installed here" / "site" / "probe_ray" / "server").stat().st_mode & 0o111

    # The machine has its own copy of a bundled package (as the lent image has hypothesis): the
    # bundle's must win.
    machines = tmp_path / "machine-site" / "probe_wheel"
    machines.mkdir(parents=True)
    (machines / "__init__.py").write_text("WHO = 'the machine'\n")
    env = {**_plain_env(), "PYTHONPATH": str(machines.parent)}
    script = (f"{exports}\n"
              "command -v ip\n"
              "python3 -c 'import probe_wheel; print(probe_wheel.WHO)'\n"
              "ip\n")  # the stand-in ip is env: it prints what a command started through `ip netns exec` gets
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == str(tmp_path / "installed here" / "bin" / "ip")
    assert lines[1] == "the bundle"
    started_with = dict(line.split("=", 1) for line in lines[2:] if "=" in line)
    assert "LD_LIBRARY_PATH" not in started_with


@pytest.mark.slow  # unpacks the bundle's Debian packages and wheels
@needs_dpkg
def test_install_names_the_claims_plugin_only_where_pytest_would_not_find_it(tmp_path):
    """Named where pytest also finds its entry point (the suite installed, even editable), the
    plugin would be registered twice and pytest would stop before collecting anything."""
    bundle = _small_bundle(tmp_path)
    installed = any(e.value == "harness.suite.plugin" for e in entry_points(group="pytest11"))
    proc = _install(bundle, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert ("export PYTEST_PLUGINS=harness.suite.plugin" in proc.stdout) == (not installed)
    # A Python without the suite installed, as a lent GPU machine's: the checkout is all it has.
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "bare")], check=True)
    proc = _install(bundle, tmp_path, python_dir=tmp_path / "bare" / "bin")
    assert proc.returncode == 0, proc.stderr
    assert "export PYTEST_PLUGINS=harness.suite.plugin" in proc.stdout.splitlines()


@needs_dpkg
def test_install_names_a_missing_tool(tmp_path):
    bundle = _small_bundle(tmp_path, tools=("ip",))
    proc = _install(bundle, tmp_path)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1] == f"device_bundle: tc is not in {bundle}/debs: rebuild the bundle"


def test_device_run_stops_where_the_install_fails(tmp_path):
    """Without a bundle, device_run.sh ends with the install's error, packing what it has; it does
    not go on to run pytest without the suite's packages."""
    (tmp_path / "tests_gpu").symlink_to(SCRIPT.parent)
    env = {**_plain_env(), "OUT": str(tmp_path / "out"), "DEVICE_BUNDLE_PREFIX": str(tmp_path / "installed")}
    proc = subprocess.run([str(SCRIPT.parent / "device_run.sh")], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("device_bundle: .device-bundle/ray.tar.xz is missing: build the bundle first "
                                   "and carry .device-bundle")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["device-run.tar.gz"]
