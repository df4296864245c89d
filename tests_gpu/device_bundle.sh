#!/usr/bin/env bash
# What the suite needs on a lent GPU machine that has Python 3.12, jax, flax and optax but no Ray,
# datasets, jsonschema or iproute2, and that fetches nothing: build the bundle here, carry it there.
#
#   tests_gpu/device_bundle.sh build [DIR]     # here, with the package registries: DIR (default
#                                              # .device-bundle, git-ignored) under 64 MiB
#   tests_gpu/device_bundle.sh install [DIR]   # there, in the repository root: unpacks into
#                                              # $DEVICE_BUNDLE_PREFIX (default $TMPDIR/device-bundle) and
#                                              # prints the exports to eval (PYTHONPATH, PATH, PYTEST_PLUGINS)
#
# e.g. run(carry=[".device-bundle"], command="x=$(tests_gpu/device_bundle.sh install) && eval \"$x\" && pytest -m gpu")
# (not `eval "$(... install)" && ...`: eval succeeds on a failed install's empty output)
#
# Ray's wheel (79 MB) is over what a call carries; unpacked without its Java jars and the
# dashboard's source maps and packed with xz it is about 31 MB. asyncssh (the live slices' SSH,
# which the emulated clusters' module imports too) travels with cryptography and cffi. Its own dependencies and datasets'
# heavy ones (numpy, pandas, pyarrow, fsspec, huggingface-hub) are on the machine already; the
# small ones that are not travel as wheels. iproute2 travels as Debian packages unpacked with dpkg -x.
set -euo pipefail

PY_VERSION=3.12
PLATFORM=manylinux2014_x86_64
RAY="ray==2.60.0"
# The suite's own dependencies that such a machine may lack, bounded as pyproject.toml bounds them;
# where the machine has one already, the bundle's copy comes first on PYTHONPATH.
WHEELS=(datasets==5.2.0 dill multiprocess xxhash jsonschema jsonschema-specifications referencing rpds-py attrs
        "tokenizers>=0.23,<0.24" "pyroute2>=0.9.7,<0.10" "pytest-benchmark>=5,<6" py-cpuinfo
        "pytest-xdist>=3.6,<4" execnet hypothesis sortedcontainers
        "asyncssh>=2.24,<3" cryptography cffi pycparser typing_extensions)
DEBS=(iproute2 libbpf1 libelf1 libmnl0 libxtables12 libcap2 libbsd0 libmd0 libdb5.3 libtirpc3 libgssapi-krb5-2 libkrb5-3
      libk5crypto3 libkrb5support0 libkeyutils1)
LIMIT_BYTES=$((60 * 1024 * 1024))  # under the 64 MiB a call carries, with room for the repository

build() {
    local dir=$1
    rm -rf "$dir" && mkdir -p "$dir/wheels" "$dir/debs" "$dir/tmp"
    pip download --quiet --no-deps --only-binary=:all: --python-version "$PY_VERSION" --platform "$PLATFORM" \
        -d "$dir/tmp" "$RAY"
    # Unpacked keeping the wheel's file modes: `python3 -m zipfile -e` drops them, and Ray's
    # gcs_server and raylet must stay executable.
    (cd "$dir/tmp" && python3 -c '
import glob, os, zipfile
with zipfile.ZipFile(glob.glob("ray-*.whl")[0]) as wheel:
    for member in wheel.infolist():
        path = wheel.extract(member, "unpacked")
        mode = member.external_attr >> 16
        if mode & 0o111:
            os.chmod(path, mode & 0o777)')
    local binary
    for binary in ray/core/src/ray/gcs/gcs_server ray/core/src/ray/raylet/raylet; do
        if [ ! -x "$dir/tmp/unpacked/$binary" ]; then
            echo "device_bundle: $binary is not executable after unpacking $RAY" >&2
            exit 1
        fi
    done
    rm -rf "$dir/tmp/unpacked/ray/jars"
    find "$dir/tmp/unpacked" -name '*.map' -delete
    tar -C "$dir/tmp/unpacked" -cJf "$dir/ray.tar.xz" .
    rm -rf "$dir/tmp"
    pip download --quiet --no-deps --only-binary=:all: --python-version "$PY_VERSION" --platform "$PLATFORM" \
        -d "$dir/wheels" "${WHEELS[@]}"
    (cd "$dir/debs" && apt-get download "${DEBS[@]}" >/dev/null)
    local size
    size=$(du -sb "$dir" | cut -f1)
    echo "bundle $dir: $((size / 1024 / 1024)) MiB" >&2
    if [ "$size" -gt "$LIMIT_BYTES" ]; then
        echo "device_bundle: $dir is $size bytes, over the $LIMIT_BYTES a call can carry" >&2
        exit 1
    fi
}

install() {
    local dir=$1 prefix
    # Outside the bundle, which must stay small enough to carry; $DEVICE_BUNDLE_PREFIX to choose.
    prefix=${DEVICE_BUNDLE_PREFIX:-${TMPDIR:-/tmp}/device-bundle}
    if [ ! -f "$dir/ray.tar.xz" ]; then
        echo "device_bundle: $dir/ray.tar.xz is missing: build the bundle first and carry $dir" >&2
        exit 1
    fi
    # A warm machine keeps its files between calls: start from nothing so that a second call
    # installs the same thing as the first.
    rm -rf "$prefix/site" "$prefix/root" "$prefix/bin" && mkdir -p "$prefix/site" "$prefix/root" "$prefix/bin"
    # Python's own lzma, since a slim image may have no xz for tar -J.
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' \
        "$dir/ray.tar.xz" "$prefix/site"
    python3 -m pip install --quiet --no-deps --no-index --target "$prefix/site" "$dir"/wheels/*.whl >&2
    for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$prefix/root"; done
    # ip and tc find their Debian libraries through the loader's --library-path, which, unlike
    # LD_LIBRARY_PATH, is not inherited: `ip netns exec` starts Python, Ray and CUDA with the
    # machine's own libraries.
    local libs="$prefix/root/usr/lib/x86_64-linux-gnu:$prefix/root/lib/x86_64-linux-gnu" tool binary candidate
    for tool in ip tc; do
        binary=
        for candidate in "$prefix"/root/{usr/sbin,usr/bin,sbin,bin}/"$tool"; do
            if [ -f "$candidate" ] && [ ! -L "$candidate" ]; then binary=$candidate; fi
        done
        if [ -z "$binary" ]; then
            echo "device_bundle: $tool is not in $dir/debs: rebuild the bundle" >&2
            exit 1
        fi
        printf '#!/bin/sh\nexec /lib64/ld-linux-x86-64.so.2 --library-path "%s" "%s" "$@"\n' "$libs" "$binary" \
            > "$prefix/bin/$tool"
        chmod +x "$prefix/bin/$tool"
    done
    echo "export PYTHONPATH=$(printf %q "$prefix/site:$PWD")\${PYTHONPATH:+:\$PYTHONPATH}"
    echo "export PATH=$(printf %q "$prefix/bin"):\$PATH"
    # The claims' pytest plugin is an entry point of the installed package (an editable install
    # leaves one in the checkout's *.egg-info too); where none is seen, it is named here. Named
    # where pytest also finds the entry point, it would be registered twice, and pytest stops.
    if ! PYTHONPATH="$prefix/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" python3 -c '
import sys
from importlib.metadata import entry_points
sys.exit(0 if any(e.value == "harness.suite.plugin" for e in entry_points(group="pytest11")) else 1)'; then
        echo "export PYTEST_PLUGINS=harness.suite.plugin"
    fi
}

case "${1:-}" in
    build) build "${2:-.device-bundle}" ;;
    install) install "${2:-.device-bundle}" ;;
    *) echo "usage: $0 build|install [DIR]" >&2; exit 2 ;;
esac
