#!/usr/bin/env python3
"""The CPU targets of issue #10, read from `linattn bench` results (and `scripts/peers.py`
results for the peer target), as a markdown table.

    python3 scripts/cpu_targets.py RUN.json [--peers PEERS.json] [--n 16384] [--memory-n 65536]

GEMM bound of a cell = useful FLOPs (4·B·H·N·C·M forward, 3× that forward+backward) / the
fp32 GEMM rate measured next to the cell (`gemm_adjacent_gflops`; the run's rate for files
without it). Medians throughout; every figure comes from the files given, nothing else.
"""
import argparse
import json
import statistics
import sys

CHUNKED, RECURRENT, NONCAUSAL = (
    "cpu/causal_chunked/f32",
    "cpu/causal_recurrent/f32",
    "cpu/noncausal/f32",
)


def load(path):
    with open(path) as f:
        return json.load(f)


def ok_cells(results):
    return [c for c in results["cells"] if c.get("status") == "ok"]


def find(cells, backend, mode, n):
    for c in cells:
        if c["backend"] == backend and c["mode"] == mode and c["shape"]["seq"] == n:
            return c
    return None


def bound_s(results, cell):
    """Useful FLOPs over the GEMM rate next to the cell, in seconds."""
    s = cell["shape"]
    useful = 4 * s["batch"] * s["heads"] * s["seq"] * s["dk"] * s["dv"]
    if cell["mode"] == "forward+backward":
        useful *= 3
    adjacent = cell.get("gemm_adjacent_gflops") or []
    rate = statistics.median(adjacent) if adjacent else results["gemm_rate"]["median_gflops"]
    return useful / (rate * 1e9), rate


def ms(x):
    return f"{x * 1e3:.1f} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run")
    ap.add_argument("--peers")
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--memory-n", type=int, default=65536)
    args = ap.parse_args()
    run = load(args.run)
    cells = ok_cells(run)
    rows = []

    def ratio_row(name, backend, mode, limit):
        c = find(cells, backend, mode, args.n)
        if c is None:
            rows.append((name, "not in the file", f"≤ {limit}×", "–"))
            return
        b, rate = bound_s(run, c)
        r = c["median_s"] / b
        rows.append(
            (
                name,
                f"{ms(c['median_s'])} = {r:.2f}× the bound {ms(b)} (GEMM {rate:.0f} GFLOP/s)",
                f"≤ {limit}×",
                "yes" if r <= limit else "no",
            )
        )

    ratio_row("chunked forward", CHUNKED, "forward", 2.0)
    ratio_row("non-causal forward", NONCAUSAL, "forward", 1.5)
    ratio_row("chunked forward+backward (bound: 3× the forward's)", CHUNKED, "forward+backward", 2.5)

    ch, rec = find(cells, CHUNKED, "forward", args.n), find(cells, RECURRENT, "forward", args.n)
    if ch and rec:
        sp = rec["median_s"] / ch["median_s"]
        rows.append(
            (
                "chunked forward vs recurrent",
                f"{ms(rec['median_s'])} / {ms(ch['median_s'])} = {sp:.2f}× faster",
                "≥ 3×",
                "yes" if sp >= 3 else "no",
            )
        )

    mc = find(cells, CHUNKED, "forward+backward", args.memory_n)
    mr = find(cells, RECURRENT, "forward+backward", args.memory_n)
    if mc and mr and mc.get("peak_bytes") and mr.get("peak_bytes"):
        r = mc["peak_bytes"] / mr["peak_bytes"]
        rows.append(
            (
                f"chunked backward peak memory vs recurrent, N={args.memory_n}",
                f"{mc['peak_bytes'] / 2**20:.1f} / {mr['peak_bytes'] / 2**20:.1f} MiB = {r:.3f}×",
                "≤ 1.2×",
                "yes" if r <= 1.2 else "no",
            )
        )

    if args.peers:
        peers = ok_cells(load(args.peers))
        for p in sorted(peers, key=lambda c: (c["backend"], c["mode"])):
            if p["shape"]["seq"] != args.n:
                continue
            ours = CHUNKED if p["causality"] == "causal" else NONCAUSAL
            c = find(cells, ours, p["mode"], args.n)
            if c is None:
                continue
            sp = p["median_s"] / c["median_s"]
            rows.append(
                (
                    f"{ours} vs {p['backend']} ({p['mode']})",
                    f"{ms(p['median_s'])} / {ms(c['median_s'])} = {sp:.1f}× faster",
                    "≥ 3×",
                    "yes" if sp >= 3 else "no",
                )
            )

    env = run["environment"]
    print(
        f"N={args.n}; linattn at {env.get('commit', '?')[:7]}, {env.get('date', '?')}, "
        f"{env.get('cpu_model', '?')} × {env.get('cpu_cores', '?')} cores"
    )
    print()
    print("| target | measured | wanted | met? |")
    print("|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
