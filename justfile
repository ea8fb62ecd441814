# linattn recipes. `just --list` shows them with these comments.
# NVRTC from the pinned pip wheel (see `just nvrtc`) is found through LD_LIBRARY_PATH.

export LD_LIBRARY_PATH := justfile_directory() + "/.nvrtc/nvidia/cu13/lib:" + env_var_or_default("LD_LIBRARY_PATH", "")

bin := "./target/release/linattn"

# Show the recipes.
default:
    @just --list

# Install NVRTC 13.0.88 (pinned to the GPU machine's CUDA 13.0 driver) into .nvrtc/.
nvrtc:
    python3 -m pip install --quiet --no-deps --target .nvrtc "nvidia-cuda-nvrtc==13.0.88"

# Build the release binary.
build:
    cargo build --release --bin linattn

# Check every available backend against the f64 oracle (forward and gradients).
check *ARGS: build
    {{bin}} check {{ARGS}}

# Every CUDA kernel on the PTX simulator (sim/*) against the f64 oracle, long cases (N up to 65536) included; about an hour on 2 cores. With globalcheck (the default) sim/causal_cumsum/* and sim/causal_recurrent+storedbwd/* need more than 24 GB: add --no-globalcheck on such a machine.
check-sim *ARGS: build
    {{bin}} check --backends 'sim/*' --long {{ARGS}}

# Sweep N for the fast backends (CPU here; CUDA too on a GPU machine); JSON into bench-results/latest/ (`--mode decode`: time per token vs context).
bench *ARGS: build
    {{bin}} bench {{ARGS}}

# The full comparison: check, sweep every backend (and peers when scripts/peers.py can run), then the markdown + SVG report.
table: build
    {{bin}} check
    {{bin}} bench --causality causal,non-causal --out bench-results/latest/bench.json
    if python3 -c "import torch" 2>/dev/null; then python3 scripts/peers.py --device auto --out bench-results/latest/peers.json; else echo "peers skipped: no PyTorch here"; fi
    {{bin}} report bench-results/latest/*.json --out-dir bench-results/latest

# Compare a fresh sweep (bench-results/regress-grid.toml) against this device's committed baseline, bench-results/<device-slug>/baseline.json; exit 1 on a regression.
regress GRID="bench-results/regress-grid.toml": build
    {{bin}} bench --grid {{GRID}} --out /tmp/linattn-regress.json --no-progress
    {{bin}} compare auto /tmp/linattn-regress.json

# Delete each __syncthreads() of kernels/ in turn: the simulator must catch every one (a checker's fault or a wrong answer); the default tests run one per kernel file. ~7 min on 2 cores (14 cold). FILTER narrows it by name (`just barriers causal_chunked`).
barriers *FILTER:
    cargo test --release -p linattn-lab --test barrier_deletion -- --include-ignored {{FILTER}}

# Simulator counters of a fixed grid (every sim/* backend, D = M in {64, 128}, N in {1024, 4096}; the chunked form per chunk, inference and training; its segmented inference forward at N = 4096) vs bench-results/sim/baseline.json, baseline-forward.json and baseline-segmented.json; exit 1 on a 0.5% move the wrong way. CI runs it.
regress-sim: build
    scripts/regress_sim.sh

# File-level import circles of every crate (CI fails on any).
cycles:
    python3 scripts/import_cycles.py crates/*

# Regenerate bench-results/sim/baseline.json, baseline-forward.json and baseline-segmented.json after an intended kernel change (commit it with the before/after).
regress-sim-update: build
    scripts/regress_sim.sh --update

# Counters, occupancy and the roofline model of one backend at one shape, per kernel.
profile BACKEND="sim/causal_chunked/f16" *ARGS: build
    {{bin}} profile --backend {{BACKEND}} {{ARGS}}

# The latency microbenchmarks (cycles per instruction class vs the model's constants): a
# measurement on a GPU, the model read back on the simulator.
latency PLATFORM="sim" *ARGS: build
    {{bin}} latency --platform {{PLATFORM}} {{ARGS}}

# Compile every kernel variant for sm_80 and sm_90 and print registers/spills per kernel.
kernels: build
    {{bin}} kernels --arch sm_80,sm_90

# S(a) of SPEC §7 over n and γ against the closed forms: table, JSON and SVG into bench-results/sparsity/.
sparsity *ARGS: build
    {{bin}} sparsity --json bench-results/sparsity/sparsity.json --svg-dir bench-results/sparsity {{ARGS}}

# Build gpu-pack/ for a lent GPU machine: stripped binary, NVRTC cache (sm_80, sm_90), peers.py, the fla wheel, MANIFEST; there: `OUT=dir gpu-pack/gpu_run.sh` (`--check DIR` verifies a pack).
gpu-pack *ARGS:
    scripts/gpu_pack.sh {{ARGS}}

# Run the test suite (the README's test command).
test:
    cargo test --workspace --release

# Fuzz TARGET (npy_reader or grid_file) for SECONDS on nightly; new inputs join fuzz/corpus/TARGET (then `cargo +nightly fuzz cmin -a TARGET -- -use_counters=0`).
fuzz TARGET SECONDS="600":
    cargo +nightly fuzz run -a {{TARGET}} fuzz/corpus/{{TARGET}} -- -max_total_time={{SECONDS}} -timeout=10 -rss_limit_mb=2048

# The stable mutation fuzzer of `cargo test` (tests/fuzz_mutation.rs) with ITERS inputs per target and another SEED.
fuzz-stable ITERS="2000000" SEED="1":
    LINATTN_FUZZ_ITERS={{ITERS}} LINATTN_FUZZ_SEED={{SEED}} cargo test --release -p linattn-lab --test fuzz_mutation

# Every fuzz target for 30 s on the committed corpus; exit 1 on a crash (CI replays the corpus on stable instead: the sanitizer build takes ~30 min cold).
fuzz-smoke:
    scripts/fuzz_smoke.sh

# Run exactly what CI runs.
ci:
    bash .ci/run

# The simulator's check beside the H100's, case by case: as-compiled numerics with the H100's MUFU tables (bench-results/h100/2026-11-27), then the share of bit-identical error figures (~8 min on 2 cores).
sim-vs-h100 *ARGS: build
    {{bin}} check --backends 'sim/*' --numerics as-compiled --no-globalcheck --mufu-tables bench-results/h100/2026-11-27/mufu --json target/sim-vs-h100.json {{ARGS}}
    python3 scripts/check_vs_hardware.py target/sim-vs-h100.json bench-results/h100/2026-11-27/check.json
