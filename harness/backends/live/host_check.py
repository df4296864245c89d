"""What a VM has, as `live up` needs to know before it installs anything: run there by the
interpreter the hosts file names, fed on standard input (`python3 - < host_check.py`), with the
distributions to look for as arguments. Prints one JSON line.

It must run on any Python 3 a VM may have, to say which it is: no harness imports, nothing newer
than Python 3.6 in the syntax.
"""
import json
import os
import platform
import shutil
import site
import subprocess
import sys


def gpus():
    """(count, names) of the NVIDIA GPUs nvidia-smi lists; (0, []) without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return 0, [], "nvidia-smi is not installed"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    except subprocess.TimeoutExpired:
        return 0, [], "nvidia-smi did not answer in 60 s"
    if out.returncode:
        return 0, [], "nvidia-smi failed: " + (out.stderr.strip().splitlines() or ["exit status %d" % out.returncode])[-1]
    names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return len(names), names, None


def missing(distributions):
    try:
        from importlib import metadata  # deferred: Python 3.7 and older lack it, and must still be told so
    except ImportError:  # before Python 3.8: everything counts as missing, the version says why
        return list(distributions)
    out = []
    for name in distributions:
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            out.append(name)
    return out


def unique(items):
    return list(dict.fromkeys(items))


def main():
    count, names, gpu_problem = gpus()
    search = site.getsitepackages() + [site.getusersitepackages()] if hasattr(site, "getsitepackages") else []
    try:
        import venv  # noqa: F401  # deferred: only whether it is there (Debian splits it off as python3-venv)
        has_venv = True
    except ImportError:
        has_venv = False
    print(json.dumps({
        "python": platform.python_version(), "executable": sys.executable,
        "missing": missing(sys.argv[1:]) + ([] if has_venv else ["venv"]),
        "site_packages": unique([p for p in search + sys.path if p.endswith("-packages") and os.path.isdir(p)]),
        "gpus": count, "gpu_names": names, "gpu_problem": gpu_problem,
        "cores": os.cpu_count(), "uid": os.getuid(), "hostname": platform.node(),
    }))


if __name__ == "__main__":  # fed on standard input, it is __main__; bringup imports it only to read it
    main()
