#!/usr/bin/env python3
"""What scripts/gpu_run.sh prints at the end of a GPU run, from the results files.

  gpu_summary.py ratios [--num BACKEND] [--den BACKEND] [--out FILE] RESULTS.json...
      Median times side by side per (shape, mode), from `linattn bench` files and peers.py
      files alike (bench-results/SCHEMA.md), and the ratio num / den (default: linattn's
      cuda/causal_chunked/bf16 over fla's peer/fla-chunk/bf16; lower is better for linattn).
  gpu_summary.py check CHECK.json
      One verdict line for a `linattn check --json` file: backends passed, failed, skipped.
  gpu_summary.py mma MMA-PROBE.json
      One line per input type of a `linattn mma-probe --json` file: the candidate models
      that match the most vectors, and whether they match all (the tensor cores' model).

Cells that did not run show their status (unavailable, oom, ...); a file cut short by a
deadline or a kill is named with its sweep state, so a partial table is never taken for a
whole one; a file that does not exist (its step wrote nothing) is named in a note. Exit
status: 0, or 1 when a file cannot be parsed or none exists (named, with why).
"""

import argparse
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: cannot read {path}: {e}")


def shape_key(cell):
    s = cell.get("shape") or {}
    return (s.get("batch"), s.get("seq"), s.get("heads"), s.get("dk"), s.get("dv"))


def shape_label(key):
    b, n, h, d, m = key
    return f"{b},{n},{h},{d}" + ("" if m == d else f",M={m}")


# A cell whose samples spread wider than this (relative standard deviation) is marked in
# the table with its spread: its median is not to be quoted without it.
NOISY = 0.10


def cell_text(cell):
    if cell is None:
        return "-"
    if cell.get("status") == "ok" and cell.get("median_s") is not None:
        text = f"{cell['median_s'] * 1e3:.3f}"
        rel = cell.get("rel_stdev")
        if rel is not None and rel > NOISY:
            text += f" (±{rel * 100:.0f}%, n={len(cell.get('samples_s') or [])})"
        return text
    return cell.get("status", "?")


def ratios(args):
    cells = {}  # (shape, mode, causality, backend) -> cell
    order = []  # (shape, mode, causality) in the order first seen
    backends = []
    notes = []
    read = 0
    for path in args.files:
        if not os.path.exists(path):
            # A step that failed or was skipped wrote nothing: the table says so and goes on.
            notes.append(f"{path}: not found (the step that writes it did not)")
            continue
        data = load(path)
        read += 1
        sweep = data.get("sweep") or {}
        state = sweep.get("state")
        producer = (data.get("environment") or {}).get("producer", "?")
        if state not in (None, "complete"):
            notes.append(f"{path} ({producer}): sweep {state}, {sweep.get('finished_cells')}"
                         f"/{sweep.get('planned_cells')} cells")
        for cell in data.get("cells", []):
            row = (shape_key(cell), cell.get("mode"), cell.get("causality"))
            if row not in order:
                order.append(row)
            if cell.get("backend") not in backends:
                backends.append(cell.get("backend"))
            cells[row + (cell.get("backend"),)] = cell
    if not read:
        raise SystemExit("error: none of the results files exists: " + ", ".join(args.files))
    others = [b for b in backends if b not in (args.num, args.den)]
    others.sort(key=lambda b: (b.startswith("peer/"), b))
    head = ["B,N,H,D", "mode", f"{args.num} ms", f"{args.den} ms", "ratio"] + [f"{b} ms" for b in others]
    rows = []
    for row in order:
        num, den = cells.get(row + (args.num,)), cells.get(row + (args.den,))
        ratio = "-"
        if num and den and num.get("status") == "ok" and den.get("status") == "ok" \
                and num.get("median_s") and den.get("median_s"):
            ratio = f"{num['median_s'] / den['median_s']:.2f}x"
        mode = row[1] if row[2] == "causal" else f"{row[1]} ({row[2]})"
        rows.append([shape_label(row[0]), mode, cell_text(num), cell_text(den), ratio]
                    + [cell_text(cells.get(row + (b,))) for b in others])
    lines = [f"median times (ms); ratio = {args.num} / {args.den}, lower is better for linattn"]
    lines += table(head, rows) if rows else ["(no cells in the files given)"]
    if any("(±" in c for r in rows for c in r):
        notes.append(f"(±x%, n=k): samples spread wider than {NOISY:.0%} (relative standard "
                     "deviation of k samples); that median is not a settled time")
    lines += [f"note: {n}" for n in notes]
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    sys.stdout.write(text)


def table(head, rows):
    """A markdown table, columns padded so it also reads as plain text."""
    widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]

    def line(r):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"
    return [line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows]


def check(args):
    data = load(args.file)
    summaries = data.get("backends", [])
    passed = [b for b in summaries if b.get("verdict") == "PASS"]
    failed = [b for b in summaries if b.get("verdict") == "FAIL"]
    other = [b for b in summaries if b.get("verdict") not in ("PASS", "FAIL")]
    cases = sum(b.get("run", 0) for b in summaries)
    grid = data.get("grid", "?") + (" --long" if data.get("long") else "")
    line = (f"check ({grid}, seed {data.get('seed')}): {len(passed)}/{len(summaries)} backends PASS, "
            f"{len(failed)} FAIL, {len(other)} not run; {cases} cases run")
    if failed:
        line += "; failed: " + ", ".join(f"{b['backend']} ({b.get('failed')}/{b.get('run')})" for b in failed)
    reasons = {}
    for b in other:
        reasons.setdefault(b.get("verdict"), []).append(b["backend"])
    for reason, names in reasons.items():
        line += f"; {reason}: " + (", ".join(names) if len(names) <= 3 else f"{len(names)} backends")
    print(line)


def mma(args):
    data = load(args.file)
    head = f"mma probe on {data.get('device', '?')} ({data.get('arch', '?')}, {data.get('kind', '?')})"
    lines = [head]
    for r in data.get("inputs", []):
        total = len(r.get("vectors", []))
        top = max((c.get("matches", 0) for c in r.get("candidates", [])), default=0)
        verdict = "matches every vector" if r.get("best_matches_all") else "no candidate matches every vector"
        lines.append(f"  {r.get('input')}: {'; '.join(r.get('best', [])) or 'none'} ({top}/{total}, {verdict})")
    if len(lines) == 1:
        raise SystemExit(f"error: {args.file}: no input types")
    print("\n".join(lines))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("ratios", help="median times side by side and the linattn / fla ratio")
    r.add_argument("--num", default="cuda/causal_chunked/bf16", help="numerator backend")
    r.add_argument("--den", default="peer/fla-chunk/bf16", help="denominator backend")
    r.add_argument("--out", help="also write the table to this file")
    r.add_argument("files", nargs="+", help="results JSON files (linattn bench, peers.py)")
    c = sub.add_parser("check", help="one verdict line of a linattn check --json file")
    c.add_argument("file")
    m = sub.add_parser("mma", help="the best candidate models of a linattn mma-probe --json file")
    m.add_argument("file")
    args = ap.parse_args(argv)
    if args.what == "ratios":
        ratios(args)
    elif args.what == "mma":
        mma(args)
    else:
        check(args)


if __name__ == "__main__":
    main()
