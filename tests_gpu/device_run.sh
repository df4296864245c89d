#!/usr/bin/env bash
# The GPU suite in one call on a lent GPU machine (a few full calls are all its 30 minutes allow):
# the bundle installed (device_bundle.sh), a probe of the emulation, then `pytest -m gpu` with its
# benchmark JSON, JUnit XML and the claims' report, all of it packed into $OUT (default
# reports/device), which comes back with the call.
#
#   run(carry=[".device-bundle"], command="tests_gpu/device_run.sh")                  # everything
#   run(carry=[".device-bundle"], command="tests_gpu/device_run.sh tests_gpu/test_speed_gpu.py")
#
# Extra arguments go to pytest; DEVICE_RUN_LIMIT_S (default 500) bounds pytest's run;
# DEVICE_RUN_PROBE=0 leaves the emulation probe out. junit.xml holds the figures tests record as
# properties (the GPU compiler's forecast against this GPU's compile and allocation). Each call
# unpacks the bundle into a directory of its own, so that calls can run side by side
# (tests_gpu/device_session.sh).
#
# $OUT receives three files: device-run.tar.gz (everything below), pytest.log and, where the claims
# ran, claims.md. A call brings back at most 8 files, and the claims' report alone has more.
#   machine.txt     nvidia-smi, JAX's devices, and what the emulation probe said on stderr
#   emulate.json    `python -m harness emulate --ray --json`: the link and Ray, before any trial
#   pytest.log, benchmark.json, junit.xml, claims/ (the --report-dir: results.jsonl, claims.md, ...)
set -euo pipefail
out=${OUT:-reports/device}
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/device-run.XXXXXX")
export DEVICE_BUNDLE_PREFIX
DEVICE_BUNDLE_PREFIX=$(mktemp -d "${TMPDIR:-/tmp}/device-bundle.XXXXXX")
pack() {
    tar -czf "$out/device-run.tar.gz" -C "$work" .
    cp "$work/pytest.log" "$out/" 2>/dev/null || true
    cp "$work/claims/claims.md" "$out/" 2>/dev/null || true
    rm -rf "$work" "$DEVICE_BUNDLE_PREFIX"
}
trap pack EXIT

# Two steps: `eval "$(... install)"` succeeds when the install fails, and pytest would then run
# without the bundle, failing on imports far from the cause.
exports=$(tests_gpu/device_bundle.sh install)
eval "$exports"
{ nvidia-smi -L || true; python3 -c "import jax; print('jax', jax.__version__, jax.devices())" || true; } \
    > "$work/machine.txt" 2>&1
if [ "${DEVICE_RUN_PROBE:-1}" != 0 ]; then
    timeout 90 python3 -m harness emulate --ray --json > "$work/emulate.json" 2>> "$work/machine.txt" || true
fi

# A call is killed at its limit (600 s at most), and what it has not packed by then stays behind;
# pytest interrupted (as by Ctrl-C) first tears down what it started and still writes the benchmark
# JSON, the JUnit XML and the trials it finished, an unfinished one recorded as interrupted.
limit=${DEVICE_RUN_LIMIT_S:-500}
status=0
timeout --signal=INT --kill-after=20 "$limit" \
    python3 -m pytest -m gpu -p no:cacheprovider -ra --benchmark-json "$work/benchmark.json" \
    --junitxml "$work/junit.xml" --report-dir "$work/claims" "$@" > "$work/pytest.log" 2>&1 || status=$?
tail -40 "$work/pytest.log"
if [ "$status" = 124 ]; then echo "device_run: pytest interrupted at DEVICE_RUN_LIMIT_S=$limit s" >&2; fi
exit $status
