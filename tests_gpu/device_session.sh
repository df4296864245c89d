#!/usr/bin/env bash
# The GPU suite in one device call of at most 600 s, in phases that each run under a limit of their
# own (tests_gpu/device_run.sh), so that one that hangs or fails leaves the others their time:
#   speed    alone on the GPU, since it times the hardware: gpt2m's trainer against a plain jitted
#            step (test_speed_gpu.py): bfloat16 as the paper's model, with its vocabulary padded,
#            and with a larger batch and each block recomputed; full float32 (no TF32), the rate
#            the emulated GPUs share
#   paper    the claims' trials at paper scale (test_claims_gpu.py): gpt2m in full float32, as the
#            paper's GPUs computed, on emulated VMs sharing the GPU, after a probe of the emulated
#            link (emulate.json: its RTT, one flow's rate at the slice's RTT and at no added delay)
#   checks   the trainer on the GPU and the GPU compiler's forecast against this GPU's own compile
#            (test_train_gpu.py, test_gpu_compiler_gpu.py)
#   claims   the claims' trials with the scale model, which is sized for CPU cores: on a GPU its
#            step is a few milliseconds, and the count of collectives decides, not the bytes
#            (docs/gpu.md); not a default phase
#
#   run(carry=[".device-bundle"], timeout_s=600, command="tests_gpu/device_session.sh")
#
# DEVICE_PHASES (default "speed paper checks") picks the phases, in order. DEVICE_SESSION_S (550)
# is the whole session's time within the call's 600 s; DEVICE_SPEED_S (300) bounds the speed phase
# (DEVICE_SPEED_K selects its cases, pytest -k),
# DEVICE_CHECKS_S (120) the checks; the paper phase gets what is left, less the checks' time where
# they follow, less 40 s for pytest's teardown and the packing. DEVICE_PAPER_K (default "4gpu":
# every slice's trials on all VMs) selects the paper phase's trials (pytest -k); DEVICE_PAPER_BATCH
# ("SEQUENCES MICROBATCHES" per GPU) defaults to what XLA's GPU compiler forecasts to fit a quarter
# of this GPU (docs/gpu.md: gpt2m in float32 needs 18.0-20.0 GiB at 2 sequences, 9.9-11.8 at 1).
# $OUT/<phase>/ gets each phase's files (device_run.sh).
set -uo pipefail
out=${OUT:-reports/device}
tails=$(mktemp -d "${TMPDIR:-/tmp}/device-session.XXXXXX")  # not in $OUT, whose files are counted
session=${DEVICE_SESSION_S:-550}
phases=${DEVICE_PHASES:-speed paper checks}

run_phase() {  # NAME LIMIT_S PROBE PYTEST ARGS...
    local name=$1 limit=$2 probe=$3
    shift 3
    if [ "$limit" -lt 60 ]; then  # said in the phase's place below, not left out silently
        echo "device_session: $name not run: ${limit} s left, under the 60 s a phase needs" | tee "$tails/$name" >&2
        return 1
    fi
    mkdir -p "$out/$name"
    echo "device_session: $name (limit ${limit} s) from $(date +%T)" >&2
    OUT="$out/$name" DEVICE_RUN_LIMIT_S=$limit DEVICE_RUN_PROBE=$probe tests_gpu/device_run.sh "$@" \
        > "$tails/$name" 2>&1
    local status=$?
    echo "device_session: $name exited $status at $(date +%T)" >&2
    return $status
}

paper_batch() {  # the batch whose forecast fits a quarter of 0.9 of this GPU (layout.SHARED_MEMORY)
    local mib
    mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
    if [ -n "$mib" ] && [ "$mib" -ge $(( 20 * 1024 * 4 * 10 / 9 + 1 )) ]; then echo "2 2"; else echo "1 1"; fi
}

left() { echo $(( session - SECONDS - 40 )); }
status=0
for phase in $phases; do
    case $phase in
        speed)
            limit=${DEVICE_SPEED_S:-300}
            # Alpa's share of the GPU, not JAX's default 75%: the largest cases need 56-58 GiB of an H100.
            XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9} \
                run_phase speed $(( limit < $(left) ? limit : $(left) )) 0 tests_gpu/test_speed_gpu.py \
                -k "${DEVICE_SPEED_K:-}" || status=1 ;;
        paper)
            read -r sequences micro <<< "${DEVICE_PAPER_BATCH:-$(paper_batch)}"
            reserve=0
            if [[ " $phases " == *" paper checks "* ]]; then reserve=${DEVICE_CHECKS_S:-120}; fi
            run_phase paper $(( $(left) - reserve )) 1 tests_gpu/test_claims_gpu.py -k "${DEVICE_PAPER_K:-4gpu}" \
                --trial-model gpt2m --trial-precision float32-full \
                --trial-batch-per-gpu "$sequences" --trial-micro-batches "$micro" || status=1 ;;
        checks)
            limit=${DEVICE_CHECKS_S:-120}
            run_phase checks $(( limit < $(left) ? limit : $(left) )) 0 tests_gpu/test_train_gpu.py \
                tests_gpu/test_gpu_compiler_gpu.py || status=1 ;;
        claims)
            run_phase claims "$(left)" 1 tests_gpu/test_claims_gpu.py || status=1 ;;
        *)
            echo "device_session: unknown phase $phase (speed, paper, checks, claims)" >&2
            status=2 ;;
    esac
done
for phase in $phases; do
    rm -f "$out/$phase/pytest.log"  # in its device-run.tar.gz, and tailed below
    echo "== $phase"
    tail -25 "$tails/$phase" 2>/dev/null
done
rm -rf "$tails"
exit $status
