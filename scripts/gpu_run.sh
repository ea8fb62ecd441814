#!/usr/bin/env bash
# The one command for the GPU machine, run from the repository root with the prebuilt
# binary carried along (target/release/linattn):
#
#   OUT=/some/dir scripts/gpu_run.sh
#
# Steps: nvidia-smi, `linattn check --long`, compute-sanitizer memcheck and racecheck over
# `linattn check`, `linattn bench` (B=4 H=16 D=M=64,
# N=2^10..2^20, forward and forward+backward), scripts/peers.py, `linattn report`.
# Every step runs even when an earlier one fails; each step's exit code is logged to
# $OUT/steps.log and the script exits non-zero when any step failed.
#
# $OUT ends up with few files (the device tool brings back at most 8): steps.log,
# check.json, bench.json, peers.json, REPORT.md and detail.tar.gz (every step's full log,
# nvidia-smi output, the report's SVG plots).
#
# Environment knobs: OUT (default ./gpu-out), LINATTN (binary path), N_MIN/N_MAX,
# CELL_SECONDS (sampling budget per cell, default 0.25), BACKENDS (default cuda/*),
# STEPS (subset of "smi check sanitize bench peers report", default all: a device call is limited to
# 10 minutes, so long sweeps can be split across calls), BENCH_EXTRA / PEERS_EXTRA (extra
# arguments), PYTHON (default python3).
#
# Memory note: linattn's inputs are generated as f64 on the host ([B,H,N,D] q, k, v, dO:
# 256 values per row at D=M=64), i.e. 32 GiB at N=2^18 and 128 GiB at N=2^20 for B=4 H=16;
# cells whose inputs do not fit in host memory are recorded as oom ("inputs: ...").

set -u

OUT="${OUT:-$PWD/gpu-out}"
LINATTN="${LINATTN:-target/release/linattn}"
PYTHON="${PYTHON:-python3}"
N_MIN="${N_MIN:-2^10}"
N_MAX="${N_MAX:-2^20}"
CELL_SECONDS="${CELL_SECONDS:-0.25}"
BACKENDS="${BACKENDS:-cuda/*}"
STEPS="${STEPS:-smi check sanitize bench peers report}"
wants() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
DETAIL="$OUT/detail"
mkdir -p "$OUT" "$DETAIL"
LOG="$OUT/steps.log"
: >"$LOG"

# libnvrtc: a CUDA toolkit's lib64, else the pip wheel's nvidia/cu13/lib (carried in
# .nvrtc/ or installed in this python).
nvrtc_dirs=()
for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 "$PWD/.nvrtc/nvidia/cu13/lib"; do
    if compgen -G "$d/libnvrtc.so*" >/dev/null; then nvrtc_dirs+=("$d"); fi
done
py_nvrtc="$("$PYTHON" - <<'EOF' 2>/dev/null
import importlib.util, os
spec = importlib.util.find_spec("nvidia")
for base in (spec.submodule_search_locations if spec else []):
    lib = os.path.join(base, "cu13", "lib")
    if os.path.isdir(lib):
        print(lib)
        break
EOF
)"
if [ -n "$py_nvrtc" ]; then nvrtc_dirs+=("$py_nvrtc"); fi
if [ "${#nvrtc_dirs[@]}" -gt 0 ]; then
    joined="$(IFS=:; echo "${nvrtc_dirs[*]}")"
    export LD_LIBRARY_PATH="$joined${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" | tee -a "$LOG"

failed=0
# step NAME COMMAND...: runs it, stdout+stderr to $DETAIL/NAME.log, exit code to the log.
step() {
    local name="$1"
    shift
    echo "=== $name: $*" | tee -a "$LOG"
    local start=$SECONDS
    "$@" >"$DETAIL/$name.log" 2>&1
    local rc=$?
    echo "=== $name: exit $rc after $((SECONDS - start)) s" | tee -a "$LOG"
    tail -n 40 "$DETAIL/$name.log"
    if [ "$rc" -ne 0 ]; then failed=1; fi
    return 0
}

if wants smi; then step nvidia-smi nvidia-smi; fi
if wants check; then step check "$LINATTN" check --long --json "$OUT/check.json"; fi
# compute-sanitizer on the default grid (odd N 1..1000, every head-dim class): 0 errors wanted.
# --error-exitcode makes a reported error fail the step even when the check itself passes.
if wants sanitize; then
    for tool in memcheck racecheck; do
        step "sanitize-$tool" compute-sanitizer --tool "$tool" --error-exitcode 3 \
            "$LINATTN" check --backends "$BACKENDS"
    done
fi
if wants bench; then
    step bench "$LINATTN" bench --n-min "$N_MIN" --n-max "$N_MAX" \
        --batch 4 --heads 16 --dk 64 --dv 64 --backends "$BACKENDS" \
        --mode forward,forward+backward --cell-seconds "$CELL_SECONDS" --no-progress \
        --out "$OUT/bench.json" ${BENCH_EXTRA:-}
fi
if wants peers; then
    step peers "$PYTHON" scripts/peers.py --n-min "$N_MIN" --n-max "$N_MAX" \
        --batch 4 --heads 16 --dk 64 --dv 64 --cell-seconds "$CELL_SECONDS" \
        --out "$OUT/peers.json" ${PEERS_EXTRA:-}
fi

report_inputs=()
for f in "$OUT/bench.json" "$OUT/peers.json"; do
    if [ -s "$f" ]; then report_inputs+=("$f"); fi
done
if ! wants report; then
    :
elif [ "${#report_inputs[@]}" -gt 0 ]; then
    step report "$LINATTN" report "${report_inputs[@]}" --out-dir "$DETAIL/report"
    if [ -f "$DETAIL/report/REPORT.md" ]; then cp "$DETAIL/report/REPORT.md" "$OUT/REPORT.md"; fi
else
    echo "=== report: skipped (no results file)" | tee -a "$LOG"
    failed=1
fi

if tar -C "$OUT" -czf "$OUT/detail.tar.gz" detail; then
    rm -rf "$DETAIL"
else
    echo "=== could not pack $DETAIL; left in place" | tee -a "$LOG"
fi
echo "=== done; failed=$failed" | tee -a "$LOG"
exit "$failed"
