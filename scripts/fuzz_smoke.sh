#!/usr/bin/env bash
# A short fuzz run of every target in fuzz/ (the .npy reader and the bench grid-file parser),
# one definition for `just fuzz-smoke` and CI: each target for FUZZ_SECONDS (default 30) on
# the committed corpus fuzz/corpus/<target>/. Exit non-zero on a crash; the input that
# crashed is left in fuzz/artifacts/<target>/ (reproduce: cargo +nightly fuzz run -a <target> <file>).
#
# Needs the nightly toolchain (libFuzzer's instrumentation); installs cargo-fuzz if missing.
# New inputs go to a scratch copy under fuzz/target/, so the committed corpus is untouched.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-30}
targets=(npy_reader grid_file)

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi

# -a: debug assertions (and so overflow checks) on, as in the long runs.
cargo +nightly fuzz build -a
for t in "${targets[@]}"; do
  scratch=fuzz/target/smoke-corpus/$t
  rm -rf "$scratch"
  mkdir -p "$scratch"
  echo "fuzz $t for ${seconds}s on fuzz/corpus/$t"
  # One job: CI machines are small. libFuzzer exits non-zero on a crash, a leak, a timeout
  # (-timeout seconds on one input) or running out of memory (-rss_limit_mb).
  cargo +nightly fuzz run -a "$t" "$scratch" "fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
done
