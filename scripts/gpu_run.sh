#!/usr/bin/env bash
# The one command for the lent GPU machine, run from a pack (scripts/gpu_pack.sh):
#
#   OUT=/some/dir BUDGET=480 gpu-pack/gpu_run.sh        (the copy inside the pack)
#   OUT=/some/dir scripts/gpu_run.sh PACKDIR            (from a checkout)
#   DRY_RUN=1 gpu-pack/gpu_run.sh                       (the plan; needs no GPU)
#
# A second run can take a subset: STEPS (comma-separated globs of step names, e.g.
# STEPS='lin-*,peers,ratios'), SHAPES (B x T x H x D list for the side-by-side steps, e.g.
# SHAPES=8x1024x8x64,1x8192x96x128) and PEERS (peers.py's --peers list).
# BUDGET (seconds, default 480) covers the whole run. Steps go in priority order, each under
# its own deadline: the smaller of its cap and what is left of the budget. A step whose
# minimum no longer fits is recorded as skipped, and time a step leaves unused passes on.
#   check       linattn check --long of every cuda/* backend            -> check.json
#   seg-check   the chunked inference forward (check --forward-only)      (side-by-side.tgz:
#               in segments of 2 chunks at every shape, O judged            seg-check.json)
#   latency     linattn latency: %clock64 chains per instruction class,  (table in summary.txt,
#               beside the model's timing of the same PTX                  JSON in rest.tgz)
#   mma-probe   linattn mma-probe: how the tensor cores sum f16/bf16 mma   (table and verdict
#               (which accumulation model the simulator should default to)  in summary.txt,
#                                                                          JSON in rest.tgz)
#   mufu        linattn mufu: the MUFU tables of the simulator's .approx   (tables and mufu.json
#               functions, verified against 5 x 2^22 random inputs          in rest.tgz, mufu/)
#   lin-*       linattn bench at fla's benchmark shapes, one per shape   -> side-by-side.tgz
#   peers       fla chunk / fused-recurrent and SDPA flash, one process   (with ratios.txt:
#   ratios      linattn chunked bf16 / fla chunk per shape and mode        the table)
#   slices1-*   the chunked bf16 forward, forward+backward with one value   (side-by-side.tgz)
#               slice per segmented CTA (LINATTN_CC_SEG_SLICES=1), D = 128 shapes
#   ncu         Nsight Compute counters of the hot kernels (N=4096)      -> ncu.csv
#   ncu-fla     time, DRAM bytes, occupancy of the chunked bf16 kernels   -> ncu-fla.csv
#               at (B, T, H, D) = (2, 16384, 16, 128)
#   ncu-stalls  their warp stall reasons and scheduler statistics there   (in rest.tgz:
#               (the metrics of ncu's WarpStateStats, SchedulerStats)       ncu/stalls.csv)
#   ncu-stalls-cr  the same for the recurrent kernels at (4,2048,16,128)     (ncu/stalls-cr.csv)
#   memcheck    compute-sanitizer memcheck over linattn check, 5 backends -> sanitize.txt
#   memcheck-seg  the same over seg-check's forward, f16 (N <= 1100)      -> sanitize.txt
#   racecheck   racecheck over one linattn bench run per backend, N=1100
#   decode      linattn bench --mode decode, context 2^8..2^16           (in rest.tgz)
#   decode-b32  the same at B = H = 32, D = M = 128, context 2^8            (in rest.tgz)
#   split-*     the chunked bf16 forward+backward with the gradients'      (side-by-side.tgz)
#               slices split (LINATTN_CC_GRAD_SLICES=split), per shape
#   perchunk-*  the chunked bf16 forward and forward+backward per chunk    (side-by-side.tgz)
#               (LINATTN_CC_SEGMENTS=off), beside lin-*'s segments
#   sweep       linattn bench B=4 H=16 D=64, N=2^10..2^16                -> sweep.json
# $OUT gets at most 8 files, rewritten as each step ends (a kill keeps what finished):
# summary.txt (the step log, the ratio table, the check verdict), check.json,
# side-by-side.tgz, ncu.csv, ncu-fla.csv, sanitize.txt, sweep.json, rest.tgz (every step's full log,
# latency.json, mma-probe.json, mufu/, ncu/stalls.csv, decode results, the environment). Exit status: 0 when no step failed or timed out (budget
# skips are not failures), 1 otherwise, 2 for a budget too small for the first step or a bad
# pack (named before anything runs).
set -uo pipefail

die() {
    echo "gpu_run: error: $*" >&2
    exit 2
}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ $# -ge 1 ]; then
    PACK=$1
elif [ -f "$here/MANIFEST" ]; then
    PACK=$here
elif [ -f "$here/../gpu-pack/MANIFEST" ]; then
    PACK=$here/../gpu-pack
else
    die "no pack: pass its directory (scripts/gpu_run.sh PACKDIR), or build one with scripts/gpu_pack.sh"
fi
[ -d "$PACK" ] || die "pack directory $PACK does not exist"
PACK=$(cd "$PACK" && pwd)
BUDGET=${BUDGET:-480}
STEPS=${STEPS:-}
PEERS=${PEERS:-fla-chunk,fla-fused-recurrent,sdpa-flash}
DRY_RUN=${DRY_RUN:-0}
OUT=${OUT:-$PWD/gpu-out}
PY=${PYTHON:-python3}
if ! [[ $BUDGET =~ ^[0-9]+$ ]] || [ "$BUDGET" -eq 0 ]; then
    die "BUDGET=$BUDGET: give a whole number of seconds"
fi

SETUP_EST=15 # unpack the cache, install fla, nvidia-smi (seconds, before the first step)
RESERVE=10   # kept at the end to pack the results
KILL=5       # timeout's grace between TERM and KILL, counted against the budget
B=$PACK/linattn
T0=$SECONDS
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
sim_elapsed=$SETUP_EST # dry run: time spent if every step used its whole deadline
est_elapsed=$SETUP_EST # dry run: time spent if every step took its estimate
est_skipped=""

# The first step's minimum must fit, or nothing starts.
MIN_FIRST=40
if [ "$BUDGET" -lt $((SETUP_EST + MIN_FIRST + KILL + RESERVE)) ]; then
    die "BUDGET=$BUDGET s is too small: the first step (check) needs >= $MIN_FIRST s after ~$SETUP_EST s of setup, plus $KILL s kill grace and $RESERVE s to pack the results: give BUDGET >= $((SETUP_EST + MIN_FIRST + KILL + RESERVE))"
fi

# ---- the pack: every file named before anything runs ---------------------------------------
[ -f "$PACK/gpu_pack.sh" ] || die "missing pack file: $PACK/gpu_pack.sh"
bash "$PACK/gpu_pack.sh" --check "$PACK" >&2 || die "the pack in $PACK fails its check (above)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/linattn-gpu.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/logs" "$WORK/sbs" "$WORK/ncu" "$WORK/cache" "$WORK/site"
if [ "$DRY_RUN" != 1 ]; then
    mkdir -p "$OUT" || die "cannot create OUT=$OUT"
    OUT=$(cd "$OUT" && pwd)
    # Results of an earlier run must not pass for this one's.
    rm -f "$OUT"/{summary.txt,check.json,side-by-side.tgz,ncu.csv,ncu-fla.csv,sanitize.txt,sweep.json,rest.tgz}
fi

# ---- environment: kernel cache, libraries, fla ------------------------------------------
for t in "$PACK"/nvrtc-cache-*.tgz; do
    tar -xzf "$t" -C "$WORK/cache" || die "cannot unpack $t"
done
export LINATTN_CACHE_DIR=$WORK/cache
unset LINATTN_KERNEL_DIR LINATTN_NVRTC_CACHE
cache_before=$(find "$WORK/cache" -type f | wc -l)
pyl=$("$PY" -c 'import nvidia, os; print(":".join(d for d in (os.path.join(p, "cu13", "lib") for p in nvidia.__path__) if os.path.isdir(d)))' 2>/dev/null)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${pyl:+:$pyl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
fla_note="no fla wheel in the pack: fla peers will be unavailable"
for whl in "$PACK"/fla_core-*.whl; do
    [ -f "$whl" ] || continue
    if "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile \
        --target "$WORK/site" "$whl" >"$WORK/logs/pip-fla.log" 2>&1; then
        export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH}
        fla_note="fla installed from ${whl##*/}"
    else
        fla_note="fla wheel did not install ($(tail -n 1 "$WORK/logs/pip-fla.log")): fla peers will be unavailable"
    fi
done
# --deadline (a clean end before the timeout, results kept) where this linattn has it.
if "$B" bench --help 2>/dev/null | grep -q -- '--deadline'; then
    deadline_note="linattn bench --deadline: yes"
    lin_deadline=1
else
    deadline_note="linattn bench --deadline: NOT in this binary (bench steps end by timeout, losing the cell in flight)"
    lin_deadline=0
fi
notes=("pack: $PACK ($(grep '^commit:' "$PACK/MANIFEST")); linattn: $("$B" --version 2>&1)"
    "$fla_note" "$deadline_note")
{
    printf '%s\n' "${notes[@]}"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    echo "LINATTN_CACHE_DIR=$LINATTN_CACHE_DIR ($cache_before entries)"
    if [ "$DRY_RUN" != 1 ]; then
        timeout 15 nvidia-smi 2>&1
        timeout 20 "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
        timeout 10 ncu --version 2>&1 | tail -n 1
        timeout 10 compute-sanitizer --version 2>&1 | tail -n 1
    fi
} >"$WORK/logs/env.txt" 2>&1
device=""
if [ "$DRY_RUN" != 1 ]; then
    device=$(timeout 10 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
fi

# ---- steps --------------------------------------------------------------------------------
rows=()
failed=0
summary_head() {
    echo "linattn GPU run started $STARTED, BUDGET=$BUDGET s, device: ${device:-none found}; written $(date -u +%H:%M:%SZ)"
    printf '%s\n' "${notes[@]}"
    printf '%-13s %-36s %4s %5s %8s %6s  %s\n' step status rc secs deadline left command
}
write_summary() { # atomic, so a kill never leaves half a summary
    {
        summary_head
        printf '%s\n' "${rows[@]}"
        if [ -s "$WORK/latency.json" ]; then # the probe table: the model's constants, measured
            echo
            grep -h -A20 '^latency probes' "$WORK"/logs/*-latency.log 2>/dev/null
        fi
        if [ -s "$WORK/mma-probe.json" ]; then # the candidates' scores and the best ones
            echo
            grep -h -A56 '^mma probe on' "$WORK"/logs/*-mma-probe.log 2>/dev/null
        fi
        if [ -s "$WORK/mufu/mufu.json" ]; then # the MUFU tables' verification (issue #23)
            echo
            grep -h -A8 '^MUFU tables of' "$WORK"/logs/*-mufu.log 2>/dev/null
        fi
    } >"$OUT/.summary.tmp" && mv "$OUT/.summary.tmp" "$OUT/summary.txt"
}
collect() { # everything finished so far into $OUT
    [ "$DRY_RUN" = 1 ] && return
    write_summary
    if [ -n "$(ls -A "$WORK/sbs")" ]; then
        tar -czf "$OUT/.sbs.tmp" -C "$WORK" sbs && mv "$OUT/.sbs.tmp" "$OUT/side-by-side.tgz"
    fi
    local f
    for f in "$WORK"/logs/*-memcheck.log "$WORK"/logs/*-memcheck-seg.log "$WORK"/logs/*-racecheck.log; do
        [ -f "$f" ] && { echo "==== ${f##*/} (last 300 lines)"; tail -n 300 "$f"; }
    done >"$WORK/sanitize.txt"
    [ -s "$WORK/sanitize.txt" ] && cp "$WORK/sanitize.txt" "$OUT/sanitize.txt"
    tar -czf "$OUT/.rest.tmp" -C "$WORK" logs latency.json mma-probe.json mufu ncu/bench.json ncu/fla-bench.json ncu/stalls.csv ncu/stalls-bench.json ncu/stalls-cr.csv ncu/stalls-cr-bench.json racecheck-bench.json decode decode-b32 --ignore-failed-read 2>/dev/null
    mv "$OUT/.rest.tmp" "$OUT/rest.tgz"
}
add_row() { # NAME STATUS RC SECS DEADLINE LEFT COMMAND...: one line of the step log
    local name=$1 status=$2 rc=$3 secs=$4 dl=$5 left=$6
    shift 6
    rows+=("$(printf '%-13s %-36s %4s %5s %8s %6s  %s' "$name" "$status" "$rc" "$secs" "$dl" "$left" "$(shown "$@")")")
}
shown() { # a command as text, the pack's path shortened
    local s="$*"
    echo "${s//$PACK/\$PACK}"
}

selected() { # NAME: whether STEPS (globs; empty: every step) selects this step
    local pat
    [ -z "$STEPS" ] && return 0
    IFS=, read -ra pats <<<"$STEPS"
    for pat in "${pats[@]}"; do
        # shellcheck disable=SC2053 # pat is a glob on purpose
        [[ $1 == $pat ]] && return 0
    done
    return 1
}

# step NAME MIN CAP EST [needs=TOOL] -- COMMAND...: run COMMAND under a deadline computed from
# the budget left (or, in a dry run, print it). @DEADLINE@ in COMMAND becomes the seconds a
# --deadline flag gets: the deadline less a margin for the last cell and the file write.
step() {
    local name=$1 min=$2 cap=$3 est=$4 needs="" left t dl argv=() a drop=0 start rc status
    shift 4
    if [ "$1" != "--" ]; then needs=${1#needs=} && shift; fi
    shift
    if ! selected "$name"; then
        add_row "$name" "not selected (STEPS=$STEPS)" - - - - "$@"
        [ "$DRY_RUN" = 1 ] && printf '%-13s %s\n' "$name" "not selected (STEPS=$STEPS)"
        return
    fi
    if [ "$DRY_RUN" = 1 ]; then left=$((BUDGET - sim_elapsed - RESERVE)); else left=$((BUDGET - (SECONDS - T0) - RESERVE)); fi
    t=$((left - KILL < cap ? left - KILL : cap))
    dl=$((t - (t / 10 > 5 ? t / 10 : 5)))
    for a in "$@"; do
        if [ "$drop" = 1 ]; then drop=0 && continue; fi
        # A linattn without --deadline would refuse the flag: leave it out there.
        if [ "$a" = --deadline ] && [ "$lin_deadline" = 0 ] && [[ " $* " == *" $B "* ]]; then
            drop=1 && continue
        fi
        [ "$a" = @DEADLINE@ ] && a=$dl
        argv+=("$a")
    done
    if [ "$DRY_RUN" = 1 ]; then # the same plan again, every step taking its estimate
        local left_e=$((BUDGET - est_elapsed - RESERVE)) te
        te=$((left_e - KILL < cap ? left_e - KILL : cap))
        if [ "$te" -ge "$min" ]; then est_elapsed=$((est_elapsed + (est < te ? est : te))); else est_skipped+=" $name"; fi
    fi
    if [ "$t" -lt "$min" ]; then
        status="skipped (budget: $((left > 0 ? left : 0)) s left, step needs >= $((min + KILL)) s)"
        add_row "$name" "$status" - - - "$left" "${argv[@]}"
        [ "$DRY_RUN" = 1 ] && printf '%-13s %s\n' "$name" "$status"
        collect
        return
    fi
    if [ "$DRY_RUN" = 1 ]; then
        sim_elapsed=$((sim_elapsed + t + KILL))
        printf '%-13s deadline %4d s (min %3d, cap %3d, est. %3d)%s\n    %s\n' "$name" "$t" "$min" "$cap" "$est" \
            "$([ -n "$needs" ] && ! command -v "$needs" >/dev/null && echo "  [$needs not on this machine]")" "$(shown "${argv[@]}")"
        if [ "$name" = peers ]; then # checks the shapes and peer names, imports no torch
            "$PY" "$PACK/peers.py" "${argv[@]:2}" --dry-run | sed 's/^/    /' || failed=1
        fi
        return
    fi
    if [ -n "$needs" ] && ! command -v "$needs" >/dev/null; then
        add_row "$name" "skipped ($needs not found)" - - - "$left" "${argv[@]}"
        collect
        return
    fi
    local log
    log=$WORK/logs/$(printf '%02d' "${#rows[@]}")-$name.log
    echo "\$ $(shown "${argv[@]}")" >"$log"
    echo "== $name (deadline $t s, $left s left): $(shown "${argv[@]}")" >&2
    start=$SECONDS
    timeout -k "$KILL" "$t" "${argv[@]}" >>"$log" 2>&1
    rc=$?
    case $rc in
        0) status=ok ;;
        124 | 137) status="timeout after $t s" && failed=1 ;;
        *) status=failed && failed=1 ;;
    esac
    add_row "$name" "$status" "$rc" "$((SECONDS - start))" "$t" "$left" "${argv[@]}"
    echo "   $status (rc $rc) in $((SECONDS - start)) s" >&2
    collect
}

if [ "$DRY_RUN" = 1 ]; then
    echo "DRY RUN (nothing that needs a GPU runs); BUDGET=$BUDGET s, OUT=$OUT"
    sed 's/^/  /' "$WORK/logs/env.txt"
    echo "  setup ~$SETUP_EST s, $RESERVE s kept for packing, $KILL s kill grace per step"
    echo "deadlines assume every earlier step uses its whole deadline (the worst case):"
fi

step check 40 120 45 -- "$B" check --long --backends 'cuda/*' --json "$OUT/check.json"
# The inference forward, which check (dO staged: the training forward) does not run: the
# chunked form's segmented kernels (cc_seg_sums, cc_seg_scan, cc_forward_seg) forced at every
# shape with D <= 128 (segments of 2 chunks; by default only large shapes take them).
step seg-check 10 60 8 -- env LINATTN_CC_SEGMENTS=2 "$B" check --long --forward-only \
    --backends 'cuda/causal_chunked/*' --json "$WORK/sbs/seg-check.json"
# Seconds: a few thousand %clock64 cycles per probe, 5 launches each, plus the simulator's
# timing of the same PTX. Early because the model's constants are what it measures.
step latency 5 30 8 -- "$B" latency --platform cuda --repeats 5 --out "$WORK/latency.json"
# Two launches of a few hundred test vectors, scored on the host: seconds. Early because its
# answer decides the simulator's default mma model (issue #23 part 6).
step mma-probe 5 20 3 -- "$B" mma-probe --platform cuda --json "$WORK/mma-probe.json"
# The simulator's bit-exact .approx (issue #23): ex2 (x >= 0 and, since 2026-11-27, x < 0:
# ex2neg.mufu), rsqrt, rcp at every table index (~59M results) and 5 x 2^22 verification
# inputs; seconds of GPU, the rest host-side prediction and gzip (12 s in all with three
# tables). Tables (~1-2 MB gzipped) and mufu.json go into rest.tgz (mufu/).
step mufu 10 60 20 -- "$B" mufu --platform cuda --out "$WORK/mufu"

# Side by side at fla's benchmark shapes (B, T, H, D), bf16: linattn, then the peers in
# one process (fla's Triton compile and autotune, ~90 s, paid once), then the ratio table.
LB=cuda/causal_chunked/bf16,cuda/causal_chunked/f16,cuda/causal_recurrent/bf16,cuda/softmax/f16
IFS=, read -ra SHAPES <<<"${SHAPES:-4x2048x16x128,2x16384x16x128,8x1024x8x64,1x8192x96x128,4x4096x64x128}"
for sh in "${SHAPES[@]}"; do
    [[ $sh =~ ^[0-9]+x[0-9]+x[0-9]+x[0-9]+$ ]] || die "SHAPES: '$sh' is not B x T x H x D (e.g. 2x16384x16x128)"
done
for sh in "${SHAPES[@]}"; do
    IFS=x read -r b n h d <<<"$sh"
    step "lin-b$b-n$n" 10 30 12 -- "$B" bench --backends "$LB" --n "$n" --batch "$b" --heads "$h" --dk "$d" \
        --mode forward,forward+backward --cell-seconds 0.3 --warmup 3 --no-progress \
        --deadline @DEADLINE@ --out "$WORK/sbs/lin-b$b-n$n-h$h-d$d.json"
done
step peers 60 200 160 -- "$PY" "$PACK/peers.py" --shapes "$(IFS=,; echo "${SHAPES[*]}")" --precision bf16 \
    --peers "$PEERS" --mode forward,forward+backward \
    --cell-seconds 0.3 --warmup 3 --deadline @DEADLINE@ --out "$WORK/sbs/peers.json"
sbs_files=()
for sh in "${SHAPES[@]}"; do
    IFS=x read -r b n h d <<<"$sh"
    sbs_files+=("$WORK/sbs/lin-b$b-n$n-h$h-d$d.json")
done
step ratios 2 10 1 -- "$PY" "$PACK/gpu_summary.py" ratios --out "$WORK/sbs/ratios.txt" "${sbs_files[@]}" "$WORK/sbs/peers.json"
# The segmented kernels with one value slice per CTA (LINATTN_CC_SEG_SLICES=1, the kernels
# of 2026-11-27), beside the lin-* steps' default, where D = M = 128 pairs both slices in one
# CTA on sm_90: at the D = 128 shapes only (D = 64 never pairs). The program is compiled on
# the machine (the pack's cache holds the default programs), ~10 s once.
for sh in "${SHAPES[@]}"; do
    IFS=x read -r b n h d <<<"$sh"
    [ "$d" = 128 ] || continue
    step "slices1-b$b-n$n" 5 30 8 -- env LINATTN_CC_SEG_SLICES=1 "$B" bench --backends cuda/causal_chunked/bf16 \
        --n "$n" --batch "$b" --heads "$h" --dk "$d" --mode forward,forward+backward --cell-seconds 0.3 --warmup 3 \
        --no-progress --deadline @DEADLINE@ --out "$WORK/sbs/slices1-b$b-n$n-h$h-d$d.json"
done
# Hardware counters of the hot kernels (prefixes of kernels/*.cu), one run each.
M=smsp__inst_executed.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active,sm__maximum_warps_per_active_cycle_pct,gpu__time_duration.sum,launch__registers_per_thread,launch__grid_size,launch__block_size
HOT=cuda/causal_chunked/f16,cuda/causal_recurrent/f16,cuda/noncausal/f16,cuda/causal_cumsum/f16
step ncu 20 60 40 needs=ncu -- ncu --clock-control none --kernel-name 'regex:^(cc_|cr_|cs_|nc_|fm_|dec_|sm_)' \
    --launch-count 80 --metrics "$M" --export "$WORK/ncu/profile" --force-overwrite \
    "$B" bench --backends "$HOT" --causality causal,non-causal --n 4096 --batch 1 --heads 1 --dk 64 \
    --mode forward+backward --warmup 0 --repeats 1 --no-progress --deadline @DEADLINE@ --out "$WORK/ncu/bench.json"
# shellcheck disable=SC2016 # $1 and $2 are bash -c's own arguments
step ncu-csv 5 30 5 needs=ncu -- bash -c 'ncu --import "$1" --csv >"$2"' _ "$WORK/ncu/profile.ncu-rep" "$OUT/ncu.csv"

# The same counters and times for the chunked kernels at one fla shape, where the model must
# predict the targets (issue #22): fewer metrics, so fewer replays of the large launches.
MF=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,sm__maximum_warps_per_active_cycle_pct,launch__registers_per_thread,launch__grid_size,launch__block_size
# shellcheck disable=SC2016 # $1.. are bash -c's own arguments
step ncu-fla 20 60 30 needs=ncu -- bash -c 'ncu --clock-control none --kernel-name "regex:^cc_" --launch-count 40 --metrics "$1" --export "$2" --force-overwrite "${@:4}" && ncu --import "$2.ncu-rep" --csv >"$3"' _ \
    "$MF" "$WORK/ncu/fla" "$OUT/ncu-fla.csv" "$B" bench --backends cuda/causal_chunked/bf16 --n 16384 --batch 2 --heads 16 --dk 128 \
    --mode forward,forward+backward --warmup 0 --repeats 1 --no-progress --out "$WORK/ncu/fla-bench.json"
# Why the hardware is slower than the model at that shape: the warp stall reasons (cycles a
# warp spent in each state per issued instruction, the numbers of ncu's WarpStateStats chart)
# and the scheduler statistics (issue slots used, active and eligible warps per scheduler),
# asked for by name with --metrics, so the CSV has them as rows `linattn profile --against`
# reads beside the model's critical path (on 2026-11-27 the sections alone exported only
# their headers: the chart is not a metric row). Names unknown to the installed ncu would
# fail the collection: the step then exports the sections with --print-details all. Into
# rest.tgz (ncu/stalls.csv; ncu/stalls-cr.csv: the recurrent form at (4, 2048, 16, 128),
# where the recalibrated model reads 1.05-1.30x of the measured time).
ST=smsp__inst_executed.sum,gpu__time_duration.sum,smsp__issue_active.avg.per_cycle_active,smsp__warps_active.avg.per_cycle_active,smsp__warps_eligible.avg.per_cycle_active,smsp__average_warp_latency_per_inst_issued.ratio
for r in barrier branch_resolving dispatch_stall drain imc_miss lg_throttle long_scoreboard math_pipe_throttle membar mio_throttle misc no_instruction not_selected selected short_scoreboard sleeping tex_throttle wait; do
    ST+=,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio
done
# shellcheck disable=SC2016 # $1.. are bash -c's own arguments
STALLS='ncu --clock-control none --kernel-name "regex:^$1" --launch-count 40 --metrics "$2" --export "$3" --force-overwrite "${@:5}" && ncu --import "$3.ncu-rep" --csv >"$4" || { ncu --clock-control none --kernel-name "regex:^$1" --launch-count 40 --section WarpStateStats --section SchedulerStats --export "$3" --force-overwrite "${@:5}" && ncu --import "$3.ncu-rep" --csv --print-metric-name name --print-details all >"$4"; }'
step ncu-stalls 20 60 30 needs=ncu -- bash -c "$STALLS" _ cc_ "$ST" "$WORK/ncu/stalls" "$WORK/ncu/stalls.csv" \
    "$B" bench --backends cuda/causal_chunked/bf16 --n 16384 --batch 2 --heads 16 --dk 128 \
    --mode forward,forward+backward --warmup 0 --repeats 1 --no-progress --out "$WORK/ncu/stalls-bench.json"
step ncu-stalls-cr 15 45 20 needs=ncu -- bash -c "$STALLS" _ cr_ "$ST" "$WORK/ncu/stalls-cr" "$WORK/ncu/stalls-cr.csv" \
    "$B" bench --backends cuda/causal_recurrent/bf16 --n 2048 --batch 4 --heads 16 --dk 128 \
    --mode forward+backward --warmup 0 --repeats 1 --no-progress --out "$WORK/ncu/stalls-cr-bench.json"

# Sanitizers. check has no smaller grid than its default, so memcheck takes 5 backends over
# it (0 errors in under 35 s on the H100); racecheck, far slower, gets one bench run per backend.
step memcheck 20 60 30 needs=compute-sanitizer -- compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$B" check --backends "$HOT,cuda/softmax/f16"
step memcheck-seg 10 30 12 needs=compute-sanitizer -- env LINATTN_CC_SEGMENTS=2 compute-sanitizer --tool memcheck \
    --error-exitcode 3 "$B" check --forward-only --backends cuda/causal_chunked/f16
step racecheck 20 60 30 needs=compute-sanitizer -- compute-sanitizer --tool racecheck --error-exitcode 3 \
    "$B" bench --backends "$HOT" --causality causal,non-causal --n 1100 --batch 1 --heads 2 --dk 64 \
    --mode forward+backward --warmup 0 --repeats 1 --no-progress --deadline @DEADLINE@ --out "$WORK/racecheck-bench.json"

step decode 8 20 10 -- "$B" bench --mode decode --backends cuda/decode/f32,cuda/decode/f16,cpu/decode/f32 \
    --n-min 2^8 --n-max 2^16 --no-progress --deadline @DEADLINE@ --out "$WORK/decode"
# The state update at scale (#21's target: >= 70% of HBM at B = H = 32, D = M = 128).
step decode-b32 8 20 10 -- "$B" bench --mode decode --backends cuda/decode/f32 --batch 32 --heads 32 \
    --dk 128 --n 2^8 --no-progress --deadline @DEADLINE@ --out "$WORK/decode-b32"
# The chunked gradient kernels with their output slices split (one CTA per 64-wide slice),
# after the counters and sanitizers since 2026-11-27 (the stall reasons come first),
# beside the lin-* steps' default (one CTA per chunk looping over them from 1024 chunk-CTAs,
# every fla shape): which spread the hardware prefers, shape by shape.
for sh in "${SHAPES[@]}"; do
    IFS=x read -r b n h d <<<"$sh"
    step "split-b$b-n$n" 5 20 6 -- env LINATTN_CC_GRAD_SLICES=split "$B" bench --backends cuda/causal_chunked/bf16 \
        --n "$n" --batch "$b" --heads "$h" --dk "$d" --mode forward+backward --cell-seconds 0.3 --warmup 3 \
        --no-progress --deadline @DEADLINE@ --out "$WORK/sbs/split-b$b-n$n-h$h-d$d.json"
done

# The chunked form per chunk (inference: cc_forward_h + cc_forward; training: the split walk +
# cc_forward_train, then the backward), beside the lin-* steps' default, which runs both
# forwards in segments at every fla shape (D <= 128; training on sm_90): which the hardware
# prefers, shape by shape.
for sh in "${SHAPES[@]}"; do
    IFS=x read -r b n h d <<<"$sh"
    step "perchunk-b$b-n$n" 5 30 6 -- env LINATTN_CC_SEGMENTS=off "$B" bench --backends cuda/causal_chunked/bf16 \
        --n "$n" --batch "$b" --heads "$h" --dk "$d" --mode forward,forward+backward --cell-seconds 0.3 --warmup 3 \
        --no-progress --deadline @DEADLINE@ --out "$WORK/sbs/perchunk-b$b-n$n-h$h-d$d.json"
done
# Last: the sweep takes what is left (it stops at its deadline with the cells it has).
step sweep 20 100 90 -- "$B" bench --backends "$HOT,cuda/softmax/f16" --causality causal,non-causal \
    --n-min 2^10 --n-max 2^16 --batch 4 --heads 16 --dk 64 --mode forward,forward+backward \
    --cell-seconds 0.2 --no-progress --deadline @DEADLINE@ --out "$OUT/sweep.json"

if [ "$DRY_RUN" = 1 ]; then
    worst=$((sim_elapsed + RESERVE))
    echo "budget arithmetic: setup $SETUP_EST + deadlines and kill grace $((sim_elapsed - SETUP_EST)) + packing $RESERVE = $worst s <= BUDGET $BUDGET s: $([ "$worst" -le "$BUDGET" ] && echo OK || echo OVER)"
    echo "with every step taking its estimate (the 2026-11-25 H100 run where it measured one), the run takes ~$((est_elapsed + RESERVE)) s and skips:${est_skipped:- nothing}"
    echo "(a real run computes each deadline from the time really left: what a step leaves unused passes on)"
    [ "$worst" -le "$BUDGET" ] || exit 1
    exit "$failed"
fi

# ---- the end: what came back, printed -----------------------------------------------------
cache_after=$(find "$WORK/cache" -type f | wc -l)
rows+=("nvrtc cache: $cache_before entries unpacked, $cache_after after the run ($((cache_after - cache_before)) compiled here)")
[ -f "$WORK/sbs/ratios.txt" ] && rows+=("" "$(cat "$WORK/sbs/ratios.txt")")
[ -f "$OUT/check.json" ] && rows+=("" "$("$PY" "$PACK/gpu_summary.py" check "$OUT/check.json" 2>&1)")
[ -f "$WORK/mma-probe.json" ] && rows+=("" "$("$PY" "$PACK/gpu_summary.py" mma "$WORK/mma-probe.json" 2>&1)")
rows+=("" "total $((SECONDS - T0)) s of BUDGET $BUDGET s; files in $OUT: $(find "$OUT" -maxdepth 1 -type f ! -name '.*' -printf '%f\n' | sort | tr '\n' ' ')")
collect
cat "$OUT/summary.txt"
exit "$failed"
