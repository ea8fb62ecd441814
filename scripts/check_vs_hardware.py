#!/usr/bin/env python3
"""The simulator's `linattn check --json` beside a GPU's, case by case.

  check_vs_hardware.py [--only FORM/PRECISION,...] [--min-identical F] [--min-within F]
                       SIM.json GPU.json

Pairs the cases of `sim/<form>/<precision>` with `cuda/<form>/<precision>` by case number
(same grid and seed), and per error figure (rms error of O and each gradient) counts how
many are bit-identical and how many lie within 0.9-1.1x, per backend: where the simulator's
numerics part from the hardware's. --only keeps the named backends (globs such as
causal_chunked/*): those whose kernels are unchanged since the GPU's run, or those an option
such as `check --mma-model` affects. The simulator's numerics and mma model are printed when
its file names them.

The softmax baseline is compared like for like where the GPU file allows: `sim/softmax/<p>`
runs the GEMM kernel (`sm_gemm`), and so does `cuda/softmax+gemmkernel/<p>` on the GPU, while
`cuda/softmax/<p>` runs cuBLAS, whose summation order the simulator does not follow. Where
GPU.json has `cuda/softmax+gemmkernel/<p>` cases, `sim/softmax/<p>` is paired with them (row
`softmax/<p> vs softmax+gemmkernel/<p>`), and with `cuda/softmax/<p>` apart, in an
informational table that counts in no share and no floor (its verdicts must still agree).
Where it has none (the H100 files of 2026-11), `sim/softmax/<p>` is paired with cuBLAS as
before, and one line says so.

Verdicts must agree; exit 1 if one does not, or if the share of bit-identical figures
(--min-identical) or of figures within 0.9-1.1x (--min-within) in the counted comparison
falls under the fraction given; 2 on bad input. CI runs it on the committed H100 file with
the floors the simulator reaches today (README, "Against the H100").
"""
import fnmatch
import json
import statistics
import sys
from collections import defaultdict

# The GPU backend (form/precision, device dropped) that runs the simulator's softmax GEMMs.
GEMMKERNEL = "softmax+gemmkernel"


def load(path):
    try:
        with open(path) as f:
            data = json.load(f)
        return {(c["backend"].split("/", 1)[1], c["case"]): c for c in data["cases"]}, data
    except (OSError, ValueError, KeyError, IndexError) as e:
        sys.exit(f"check_vs_hardware: {path}: {e}")


def pair_cases(sim, gpu):
    """Which GPU backend each simulator case is compared with, as lists of
    (sim key, sim case, GPU form/precision, row name): the counted pairs, and the
    informational ones (softmax against cuBLAS where the counted pair is the GEMM kernel)."""
    kernel = {k[0].partition("/")[2] for k in gpu if k[0].partition("/")[0] == GEMMKERNEL}
    counted, informational = [], []
    for key, s in sim.items():
        form, _, precision = key[0].partition("/")
        if form == "softmax" and precision in kernel:
            like = f"{GEMMKERNEL}/{precision}"
            counted.append((key, s, like, f"{key[0]} vs {like}"))
            informational.append((key, s, key[0], f"{key[0]} vs {key[0]} (cuBLAS)"))
        else:
            counted.append((key, s, key[0], key[0]))
    return counted, informational


def compare(pairs, gpu):
    """Per row, the error figures; the cases with a verdict on both sides, those whose
    verdicts differ (each printed), and the cases the GPU run did not take."""
    per = defaultdict(lambda: {"n": 0, "same": 0, "near": 0, "ratios": []})
    verdicts = disagree = newly = 0
    for key, s, gpu_form, row in pairs:
        g = gpu.get((gpu_form, key[1]))
        if g is None:
            continue
        # A case the hardware run's kernels did not take (not_applicable there) that the
        # kernels take now (e.g. the chunked form's head dims 16 and 32 since 2026-11-26) has
        # nothing to compare against: counted, not a disagreement. The reverse (the simulator
        # refusing what the GPU ran) still is one.
        if g.get("outcome") == "not_applicable" and s.get("outcome") != "not_applicable":
            newly += 1
            continue
        verdicts += 1
        if s.get("outcome") != g.get("outcome"):
            disagree += 1
            against = "" if row == key[0] else f" against cuda/{gpu_form}"
            print(f"verdicts differ: {key}{against}: sim {s.get('outcome')}, "
                  f"gpu {g.get('outcome')}")
        for es, eg in zip(s.get("errors", []), g.get("errors", [])):
            a, b = es.get("rms_ratio"), eg.get("rms_ratio")
            if a is None or b is None:
                continue
            p = per[row]
            p["n"] += 1
            p["same"] += a == b
            ratio = b / a if a > 0 else (1.0 if b == 0 else float("inf"))
            p["near"] += 0.9 <= ratio <= 1.1
            p["ratios"].append(ratio)
    return per, verdicts, disagree, newly


def totals(per):
    return tuple(sum(p[k] for p in per.values()) for k in ("n", "same", "near"))


def print_table(per):
    print("| backend | figures | identical | within 0.9-1.1x | gpu/sim min / median / max |")
    print("|---|---|---|---|---|")
    for name, p in sorted(per.items()):
        r = sorted(p["ratios"])
        print(f"| {name} | {p['n']} | {p['same']} | {p['near']} | "
              f"{r[0]:.3f} / {statistics.median(r):.3f} / {r[-1]:.3f} |")


def main(argv):
    only = None
    floors = {}  # --min-identical / --min-within: fractions the run must reach
    args = []
    rest = list(argv[1:])
    while rest:
        a = rest.pop(0)
        if a in ("--only", "--min-identical", "--min-within") and rest:
            v = rest.pop(0)
            if a == "--only":
                only = [p.strip() for p in v.split(",") if p.strip()]
            else:
                try:
                    floors[a] = float(v)
                except ValueError:
                    print(f"{a} {v}: give a fraction (0.9 = 90%)", file=sys.stderr)
                    return 2
        else:
            args.append(a)
    argv = argv[:1] + args
    if len(argv) != 3 or only == []:
        print(__doc__, file=sys.stderr)
        return 2
    sim, sim_file = load(argv[1])
    gpu, gpu_file = load(argv[2])
    if only is not None:
        sim = {k: v for k, v in sim.items() if any(fnmatch.fnmatchcase(k[0], p) for p in only)}
        if not sim:
            print(f"--only {','.join(only)}: no case of {argv[1]} matches", file=sys.stderr)
            return 2
    if "numerics" in sim_file:
        print(f"simulator: {sim_file['numerics']} numerics, mma {sim_file.get('mma_model', 'of the mode')}")
    if sim_file.get("seed") != gpu_file.get("seed"):
        print(f"seeds differ: {sim_file.get('seed')} vs {gpu_file.get('seed')}", file=sys.stderr)
        return 2
    counted, informational = pair_cases(sim, gpu)
    # One line per way the softmax baseline is paired (both where the GPU file has the
    # gemmkernel cases of one precision only).
    softmax = sorted({key[0] for key, _, _, _ in counted if key[0].startswith("softmax/")})
    like = {key[0] for key, _, _, _ in informational}
    with_cublas = [name for name in softmax if name not in like]
    if with_cublas:
        print(f"{', '.join(with_cublas)}: compared against cuBLAS (cuda/softmax), not like for "
              f"like: {argv[2]} lacks cuda/{GEMMKERNEL}")
    if like:
        print(f"{', '.join(sorted(like))}: compared against cuda/{GEMMKERNEL} (the same GEMM "
              f"kernel); against cuBLAS (cuda/softmax) in the informational table")
    per, verdicts, disagree, newly = compare(counted, gpu)
    n, same, near = totals(per)
    print(f"{verdicts} cases in both, {verdicts - disagree} with the same verdict; "
          f"{n} error figures: {same} bit-identical ({100 * same / max(n, 1):.2f}%), "
          f"{near} within 0.9-1.1x ({100 * near / max(n, 1):.2f}%)")
    if newly:
        print(f"{newly} cases the hardware run's kernels did not take (not_applicable there) "
              f"run now and are not compared")
    print_table(per)
    if informational:
        i_per, i_verdicts, i_disagree, i_newly = compare(informational, gpu)
        i_n, i_same, i_near = totals(i_per)
        print(f"\ninformational, in no share or floor: sim/softmax against cuBLAS: "
              f"{i_verdicts} cases in both, {i_verdicts - i_disagree} with the same verdict; "
              f"{i_n} error figures: {i_same} bit-identical, {i_near} within 0.9-1.1x")
        if i_newly:
            print(f"{i_newly} cases cuBLAS's backend did not take (not_applicable there) run "
                  f"now and are not compared")
        if i_per:
            print_table(i_per)
        disagree += i_disagree
    failed = 1 if disagree else 0
    for flag, got, what in (("--min-identical", same, "bit-identical"),
                            ("--min-within", near, "within 0.9-1.1x")):
        floor = floors.get(flag)
        if floor is not None and got < floor * n:
            print(f"{what}: {got} of {n} ({100 * got / max(n, 1):.2f}%), under {flag} "
                  f"{floor} ({100 * floor:.1f}%)", file=sys.stderr)
            failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv))
