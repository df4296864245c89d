#!/usr/bin/env bash
# The GPU suite in one call on a lent GPU machine (a few full calls are all its 30 minutes allow):
# the bundle installed (device_bundle.sh), then `pytest -m gpu` with its benchmark JSON and the
# claims' report written under $OUT (default reports/device), which comes back with the call.
#
#   run(carry=[".device-bundle"], command="tests_gpu/device_run.sh")                  # everything
#   run(carry=[".device-bundle"], command="tests_gpu/device_run.sh tests_gpu/test_speed_gpu.py")
#
# Extra arguments go to pytest; DEVICE_RUN_LIMIT_S (default 540) bounds pytest's run. junit.xml
# holds the figures tests record as properties (the GPU compiler's forecast against this GPU's
# compile and allocation).
set -euo pipefail
out=${OUT:-reports/device}
mkdir -p "$out"
eval "$(tests_gpu/device_bundle.sh install)"
{ nvidia-smi -L || true; python3 -c "import jax; print('jax', jax.__version__, jax.devices())"; } > "$out/machine.txt" 2>&1
# A call is killed at its limit (600 s at most) with nothing written at the session's end; pytest
# interrupted (as by Ctrl-C) first tears down what it started and still writes the benchmark JSON,
# the JUnit XML and the trials it finished, each unfinished one recorded as interrupted.
limit=${DEVICE_RUN_LIMIT_S:-540}
status=0
timeout --signal=INT --kill-after=30 "$limit" \
    python3 -m pytest -m gpu -p no:cacheprovider -ra --benchmark-json "$out/benchmark.json" --junitxml "$out/junit.xml" \
    --report-dir "$out/claims" "$@" > "$out/pytest.log" 2>&1 || status=$?
tail -40 "$out/pytest.log"
if [ "$status" = 124 ]; then echo "device_run: pytest interrupted at DEVICE_RUN_LIMIT_S=$limit s" >&2; fi
exit $status
