#!/usr/bin/env bash
# The whole GPU suite in one device call of at most 600 s, in phases that each run under a limit of
# their own (tests_gpu/device_run.sh), so that one that hangs or fails leaves the others their time:
#   speed    alone on the GPU, since it times the hardware: gpt2m's trainer against a plain jitted
#            step (test_speed_gpu.py), bfloat16 first, then bfloat16 with remat, then float32
#   claims   the claims' trials on emulated VMs that share the GPU (test_claims_gpu.py), and beside
#            them, in the same minutes,
#   checks   the trainer on the GPU and the GPU compiler's forecast against this GPU's own compile
#            (test_train_gpu.py, test_gpu_compiler_gpu.py), which time nothing. Their load on the
#            GPU and the cores is noise in the claims' step times; the claims compare techniques
#            measured under the same noise.
#   paper    with the time that is left: the trials on one emulated VM at paper scale (gpt2m in
#            bfloat16). Across VMs, gpt2m's gradients would cross a link that carries about
#            140 MB/s where the kernel has no netem (the userspace link), many seconds a step.
#
#   run(carry=[".device-bundle"], timeout_s=600, command="tests_gpu/device_session.sh")
#
# $OUT/<phase>/ gets each phase's files (device_run.sh), the loose pytest.log only where claims
# ran: eight files, what a call brings back. DEVICE_SESSION_S (default 550) is the whole session's
# time, within the call's 600 s; DEVICE_SPEED_S (default 190) bounds the speed phase, and the
# claims and the checks get what is left, less 40 s for pytest's teardown and the packing (the
# checks at most DEVICE_CHECKS_S, 240); the paper phase gets what is left after them.
set -uo pipefail
out=${OUT:-reports/device}
tails=$(mktemp -d "${TMPDIR:-/tmp}/device-session.XXXXXX")  # not in $OUT, whose files are counted
run_phase() {  # NAME LIMIT_S PROBE PYTEST ARGS...
    local name=$1 limit=$2 probe=$3
    shift 3
    mkdir -p "$out/$name"
    echo "device_session: $name (limit ${limit} s) from $(date +%T)" >&2
    OUT="$out/$name" DEVICE_RUN_LIMIT_S=$limit DEVICE_RUN_PROBE=$probe tests_gpu/device_run.sh "$@" \
        > "$tails/$name" 2>&1
    local status=$?
    echo "device_session: $name exited $status at $(date +%T)" >&2
    return $status
}

speed=tests_gpu/test_speed_gpu.py::test_gpt2m_on_one_gpu_harness_against_a_plain_step
status=0
run_phase speed "${DEVICE_SPEED_S:-190}" 0 "$speed[bfloat16-16-False]" "$speed[bfloat16-64-True]" \
    "$speed[float32-8-False]" || status=1
left=$(( ${DEVICE_SESSION_S:-550} - SECONDS - 40 ))
run_phase claims "$left" 1 tests_gpu/test_claims_gpu.py &
claims=$!
checks=${DEVICE_CHECKS_S:-240}
run_phase checks $(( checks < left ? checks : left )) 0 tests_gpu/test_train_gpu.py tests_gpu/test_gpu_compiler_gpu.py || status=1
wait "$claims" || status=1
left=$(( ${DEVICE_SESSION_S:-550} - SECONDS - 40 ))
if [ "$left" -ge 90 ]; then
    run_phase paper "$left" 0 tests_gpu/test_claims_gpu.py -k "vm1 or vm2" \
        --trial-model gpt2m --trial-precision bfloat16 || status=1
else  # said, in the paper phase's place below, not left out silently
    echo "device_session: paper not run: ${left} s left of DEVICE_SESSION_S, under the 90 s it needs" \
        | tee "$tails/paper" >&2
fi
rm -f "$out/speed/pytest.log" "$out/checks/pytest.log"  # in their device-run.tar.gz, and tailed below
for phase in speed claims checks paper; do
    echo "== $phase"
    tail -25 "$tails/$phase" 2>/dev/null
done
rm -rf "$tails"
exit $status
