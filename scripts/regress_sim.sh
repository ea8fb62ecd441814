#!/usr/bin/env bash
# The simulator-counter regression gate, one definition for `just regress-sim`,
# `just regress-sim-update` and CI.
#
# Profiles a fixed grid on the PTX simulator (every sim/* backend, D = M in {64, 128},
# N in {1024, 4096}, forward + backward, B = H = 1, modelled on sm_90) and compares it with
# the committed bench-results/sim/baseline.json; and the chunked form per chunk
# (LINATTN_CC_SEGMENTS=off; by default D <= 128 runs in segments), its inference forward (a
# forward with no backward to follow runs other kernels, cc_forward on the packed states)
# and its training forward (the split walk, cc_forward_train) with the backward, on the same
# grid against bench-results/sim/baseline-forward.json; and the segmented inference forward (cc_seg_sums,
# cc_seg_scan, cc_forward_seg, in segments of 4: a fixed length, where the default's length
# follows the shape) at N = 4096 against bench-results/sim/baseline-segmented.json:
# exit 1 if any per-token counter (or the estimate of the SASS a kernel executes,
# `profile --sass`) moved the wrong way by more than 0.5%, occupancy fell, a kernel appeared
# or vanished, or a profile of the baseline failed or was not run. Counters are
# exact, so there is no noise rule. With --update, rewrites the baseline instead (commit it
# with the before/after of a plain run in the message).
#
# Needs target/release/linattn (cargo build --release --bin linattn), NVRTC, and ptxas and
# nvdisasm (LINATTN_PTXAS, LINATTN_NVDISASM: .ci/run installs the pinned wheels); without
# them the SASS estimates are missing and the gate says so.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=./target/release/linattn
baseline=bench-results/sim/baseline.json
baseline_forward=bench-results/sim/baseline-forward.json
grid=(--backend 'sim/*' --n 1024,4096 --d 64,128 --mode forward+backward --quiet --sass)
grid_forward=(--backend 'sim/causal_chunked/*' --n 1024,4096 --d 64,128 --mode forward,forward+backward --quiet --sass)
baseline_segmented=bench-results/sim/baseline-segmented.json
grid_segmented=(--backend 'sim/causal_chunked/*' --n 4096 --d 64,128 --mode forward --quiet --sass)

if [ "${1:-}" = "--update" ]; then
  "$bin" profile "${grid[@]}" --json "$baseline"
  LINATTN_CC_SEGMENTS=off "$bin" profile "${grid_forward[@]}" --json "$baseline_forward"
  LINATTN_CC_SEGMENTS=4 "$bin" profile "${grid_segmented[@]}" --json "$baseline_segmented"
else
  "$bin" profile "${grid[@]}" --json target/regress-sim.json
  LINATTN_CC_SEGMENTS=off "$bin" profile "${grid_forward[@]}" --json target/regress-sim-forward.json
  LINATTN_CC_SEGMENTS=4 "$bin" profile "${grid_segmented[@]}" --json target/regress-sim-segmented.json
  status=0
  "$bin" compare --complete "$baseline" target/regress-sim.json || status=1
  "$bin" compare --complete "$baseline_forward" target/regress-sim-forward.json || status=1
  "$bin" compare --complete "$baseline_segmented" target/regress-sim-segmented.json || status=1
  exit $status
fi
