#!/usr/bin/env python3
"""Time peer implementations at linattn's bench shapes and write linattn's results JSON.

One process runs every shape (--shapes B x N x H x D list, or an N sweep at one B, H, D), so
one-time costs (fla's Triton compile and autotune, ~90 s on an H100) are paid once. The
results file is rewritten after every cell; --deadline ends the run cleanly.

The peers and how each is called: scripts/peer_impls.py. How a cell is timed:
scripts/peer_timing.py. --device cpu (or auto on a machine without CUDA) times the CPU peers
instead, in f32, with torch.set_num_threads(--threads) when given.

Runs on the GPU machine (Python 3, PyTorch with CUDA; fla optional), or on any CPU. Cells that cannot run
are recorded as "unavailable" (fla not importable, SDPA backend absent), "unsupported"
(e.g. flash with this head dim), "oom" or "error"; the sweep goes on.
"""

import argparse
import datetime
import itertools
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

from peer_impls import CPU_PEERS, DEFAULT_EPS, PEER_NAMES, build_peers
from peer_timing import empty_cache, is_oom, measure_copy_bandwidth, sample_stats, time_cell

SCHEMA_VERSION = 1


def parse_sizes(text):
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "^" in part:
            base, exp = part.split("^", 1)
            out.append(int(base) ** int(exp))
        else:
            out.append(int(part))
    if not out or any(v <= 0 for v in out):
        raise SystemExit(f"error: bad size list '{text}'")
    return sorted(set(out))


def git_commit():
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        commit = head.stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True)
        if dirty.returncode == 0 and dirty.stdout.strip():
            commit += "-dirty"
        return commit or "unknown"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def host_memory():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def kernel_driver_version():
    try:
        with open("/proc/driver/nvidia/version") as f:
            for word in f.readline().split():
                if word[:1].isdigit() and "." in word:
                    return word
    except OSError:
        pass
    return None


def write_atomic(path, text):
    """Temp file in the target's directory, fsync, rename: never a half-written file."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def finite_only(value):
    """JSON has no NaN/inf: such numbers become null (linattn reads null as not measured)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_only(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_only(v) for v in value if not (isinstance(v, float) and not math.isfinite(v))]
    return value


def finite_or_none(x):
    return x if (x is not None and math.isfinite(x)) else None




def flops(algorithm, b, h, n, d, m, mode):
    if algorithm == "softmax":
        fwd = 2.0 * b * h * n * n * (d + m)
    else:
        fwd = 4.0 * b * h * n * d * (m + 1.0)  # elu+1 keeps C = D
    return fwd if mode == "forward" else 3.0 * fwd


def minimal_bytes(b, h, n, d, m, elem, mode):
    rows = b * h * n
    fwd = rows * (2 * d + 2 * m)
    bwd = rows * (4 * d + 3 * m)
    return (fwd if mode == "forward" else fwd + bwd) * elem


def parse_shapes(text):
    """`BxNxHxD[xM]` items, comma-separated (fla's (B, T, H, D) order) -> [shape dict].

    M defaults to D.
    """
    shapes = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        parts = item.lower().split("x")
        if len(parts) not in (4, 5):
            raise SystemExit(f"error: shape '{item}' is not BxNxHxD or BxNxHxDxM (e.g. 4x2048x16x128)")
        try:
            dims = [int(p) for p in parts]
        except ValueError:
            raise SystemExit(f"error: shape '{item}' holds a part that is not a whole number")
        if any(d <= 0 for d in dims):
            raise SystemExit(f"error: shape '{item}' holds a size that is not positive")
        b, n, h, d = dims[:4]
        m = dims[4] if len(dims) == 5 else d
        shapes.append({"batch": b, "heads": h, "seq": n, "dk": d, "dv": m})
    if not shapes:
        raise SystemExit(f"error: no shape in '{text}'")
    return shapes


# The single-shape flags and their defaults (linattn bench's, so `just table` puts like beside
# like). Parsed with default None so --shapes can refuse being combined with any of them.
SHAPE_FLAG_DEFAULTS = {"n": None, "n_min": "2^10", "n_max": "2^16", "batch": 1, "heads": 8,
                       "dk": 64, "dv": None}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", help="explicit shapes BxNxHxD[xM], comma-separated "
                    "(e.g. 4x2048x16x128,2x16384x16x128): all in one process, so one-time "
                    "costs (Triton compile and autotune) are paid once; excludes the flags below")
    ap.add_argument("--n", help="sequence lengths, comma-separated (numbers or 2^k)")
    ap.add_argument("--n-min", help="smallest N of a power-of-two sweep (default 2^10)")
    ap.add_argument("--n-max", help="largest N of a power-of-two sweep (default 2^16)")
    ap.add_argument("--batch", type=int, help="B (default 1)")
    ap.add_argument("--heads", type=int, help="H (default 8)")
    ap.add_argument("--dk", type=int, help="D (default 64)")
    ap.add_argument("--dv", type=int, help="M (default D)")
    ap.add_argument("--precision", default="f16,bf16")
    ap.add_argument("--causality", default="causal")
    ap.add_argument("--mode", default="forward,forward+backward")
    ap.add_argument("--peers", default="", help="comma-separated peer names (default: all)")
    ap.add_argument("--warmup", type=int, default=3,
                    help="untimed calls before the samples, at least (the first compiles and "
                         "autotunes; more follow while each is still >10%% faster than the last)")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--min-repeats", type=int, default=5)
    ap.add_argument("--cell-seconds", type=float, default=1.0)
    ap.add_argument("--max-cell-seconds", type=float, default=60.0)
    ap.add_argument("--deadline", type=float, default=None,
                    help="end cleanly this many seconds after the start: no cell starts past it, "
                    "a running cell stops sampling at it (after --min-repeats samples); the "
                    "results file, rewritten after every cell, then says sweep.state 'deadline'")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                    help="cuda: the GPU peers; cpu: the CPU peers in f32; auto: cuda when visible")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    ap.add_argument("--dry-run", action="store_true",
                    help="check the arguments and print the planned cells; needs no PyTorch")
    ap.add_argument("--out", required=True, help="results JSON path ('-' for stdout)")
    args = ap.parse_args(argv)

    given = [f"--{k.replace('_', '-')}" for k in SHAPE_FLAG_DEFAULTS if getattr(args, k) is not None]
    if args.shapes is not None:
        if given:
            ap.error(f"--shapes excludes {', '.join(given)}: give every shape in --shapes")
        args.shape_list = parse_shapes(args.shapes)
    else:
        for k, v in SHAPE_FLAG_DEFAULTS.items():
            if getattr(args, k) is None:
                setattr(args, k, v)
        if args.n:
            seqs = parse_sizes(args.n)
        else:
            lo, hi = parse_sizes(args.n_min)[0], parse_sizes(args.n_max)[0]
            seqs = [1 << e for e in range(lo.bit_length() - 1, hi.bit_length()) if lo <= 1 << e <= hi]
            if not seqs:
                ap.error(f"no power of two between --n-min {args.n_min} and --n-max {args.n_max}")
        args.shape_list = [{"batch": args.batch, "heads": args.heads, "seq": s, "dk": args.dk,
                            "dv": args.dv or args.dk} for s in seqs]
    if args.deadline is not None and not (math.isfinite(args.deadline) and args.deadline > 0):
        ap.error(f"--deadline {args.deadline}: give a positive number of seconds")
    args.precisions = [p.strip() for p in args.precision.split(",") if p.strip()]
    args.causalities = [c.strip() for c in args.causality.split(",") if c.strip()]
    args.modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    for m in args.modes:
        if m not in ("forward", "forward+backward"):
            ap.error(f"unknown mode '{m}'")
    for c in args.causalities:
        if c not in ("causal", "non-causal"):
            ap.error(f"unknown causality '{c}'")
    for p in args.precisions:
        if p not in ("f16", "bf16", "f32"):
            ap.error(f"unknown precision '{p}' (f16, bf16, f32)")
    args.peer_names = [p.strip() for p in args.peers.split(",") if p.strip()] or list(PEER_NAMES)
    unknown = sorted(set(args.peer_names) - set(PEER_NAMES))
    if unknown:
        ap.error(f"unknown peers {unknown}; known: {list(PEER_NAMES)}")
    args.precision_default = args.precision == ap.get_default("precision")
    return args


def shape_text(s):
    return f"B={s['batch']} N={s['seq']} H={s['heads']} D={s['dk']} M={s['dv']}"


def main():
    args = parse_args()
    started = time.perf_counter()
    deadline = started + args.deadline if args.deadline is not None else None
    if args.dry_run:
        planned = (len(args.causalities) * len(args.shape_list) * len(args.precisions)
                   * len(args.peer_names) * len(args.modes))
        print(f"peers.py dry run: {planned} cells planned (device {args.device}; --device cpu "
              f"keeps only {sorted(CPU_PEERS)} in f32 by default)")
        print(f"  shapes: {'; '.join(shape_text(s) for s in args.shape_list)}")
        print(f"  peers: {','.join(args.peer_names)}  precisions: {','.join(args.precisions)}  "
              f"modes: {','.join(args.modes)}  causality: {','.join(args.causalities)}")
        print(f"  deadline: {args.deadline if args.deadline is not None else 'none'} s; out: {args.out}")
        return

    try:
        import torch
    except ImportError as e:
        raise SystemExit(f"error: PyTorch is required: {e}")
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device visible to PyTorch")
    precisions = args.precisions
    if device == "cpu":
        if args.threads:
            torch.set_num_threads(args.threads)
        if args.precision_default:
            precisions = ["f32"]

    fla_mod, fla_error, fla_version = None, None, None
    try:
        import fla
        import fla.ops.linear_attn as fla_mod  # noqa: F811
        fla_version = getattr(fla, "__version__", "unknown")
    except Exception as e:  # ImportError, or a Triton/CUDA mismatch at import time
        fla_mod, fla_error = None, f"{type(e).__name__}: {e}"

    dtypes = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
    peers = [p for p in build_peers(torch, fla_mod, fla_error) if p.name in args.peer_names]
    if device == "cpu":
        peers = [p for p in peers if p.name in CPU_PEERS]

    props = torch.cuda.get_device_properties(0) if device == "cuda" else None
    copy_bw = measure_copy_bandwidth(torch, device)
    environment = {
        "producer": "peers.py",
        "device_name": props.name if props else cpu_model(),
        "driver_version": kernel_driver_version() if props else None,
        "cuda_version": torch.version.cuda if props else None,
        "nvrtc_version": None,
        "gpu_memory_bytes": props.total_memory if props else None,
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count() or 1,
        "host_memory_bytes": host_memory(),
        "commit": git_commit(),
        "rustc_version": None,
        "build_profile": "python",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command_line": sys.argv,
        "peers": [
            {"name": "python", "version": platform.python_version()},
            {"name": "torch", "version": torch.__version__},
            {"name": "torch threads", "version": str(torch.get_num_threads())},
            {"name": "fla", "version": fla_version or f"unavailable: {fla_error}"},
        ],
    }
    shapes = args.shape_list
    result = {
        "schema_version": SCHEMA_VERSION,
        "environment": environment,
        "grid": {
            "seq": sorted({s["seq"] for s in shapes}), "batch": sorted({s["batch"] for s in shapes}),
            "heads": sorted({s["heads"] for s in shapes}), "dk": sorted({s["dk"] for s in shapes}),
            "dv": sorted({s["dv"] for s in shapes}), "shapes": shapes,
            "causality": args.causalities, "map": ["elu+1"],
            "backends": [f"peer/{p.name}" for p in peers],
            "precision": precisions, "mode": args.modes, "eps": DEFAULT_EPS, "decay": 1.0,
            "warmup": args.warmup, "repeats": args.repeats, "min_repeats": args.min_repeats,
            "cell_seconds": args.cell_seconds, "max_cell_seconds": args.max_cell_seconds,
            "flush_l2": False, "seed": args.seed,
        },
        "copy_bandwidth": [copy_bw] if copy_bw else [],
        "sweep": None,
        "cells": [],
    }
    planned = len(args.causalities) * len(shapes) * len(precisions) * len(peers) * len(args.modes)

    def checkpoint(state):
        # Rewritten after every cell, like linattn bench: a kill loses only the cell in flight.
        result["sweep"] = {"state": state, "planned_cells": planned,
                           "finished_cells": len(result["cells"]),
                           "elapsed_s": time.perf_counter() - started, "deadline_s": args.deadline}
        if args.out != "-":
            write_atomic(args.out, json.dumps(finite_only(result), indent=2, allow_nan=False) + "\n")

    checkpoint("running")
    sweep = Sweep(torch, device, args, dtypes, deadline, copy_bw)
    state = "complete"
    # Shapes outside precisions outside peers: the staged inputs of one (shape, precision)
    # serve every peer and mode before the next are made.
    for causality, shape, prec, peer, mode in itertools.product(
            args.causalities, shapes, precisions, peers, args.modes):
        if deadline is not None and time.perf_counter() >= deadline:
            state = "deadline"
            break
        result["cells"].append(sweep.cell(peer, shape, prec, mode, causality))
        checkpoint("running")
    sweep.drop_inputs()
    checkpoint(state)
    if args.out == "-":
        sys.stdout.write(json.dumps(finite_only(result), indent=2, allow_nan=False) + "\n")
    else:
        print(f"results written to {args.out} ({len(result['cells'])}/{planned} cells, {state})",
              file=sys.stderr)


class Sweep:
    """Runs cells one at a time, keeping the inputs of the current (shape, precision) and,
    per series, what stops larger N (oom, too slow) and the last median (to predict)."""

    def __init__(self, torch, device, args, dtypes, deadline, copy_bw):
        self.torch, self.device, self.args, self.dtypes = torch, device, args, dtypes
        self.deadline = deadline
        self.copy_gbps = copy_bw["median_gbps"] if copy_bw else None
        self.gen = torch.Generator(device=device)
        self.inputs = None  # ((shape key, precision), [q, k, v, dO])
        self.stopped = {}  # series -> (seq, status) after oom / too-slow
        self.last = {}  # series -> (seq, median)

    def drop_inputs(self):
        self.inputs = None
        empty_cache(self.torch, self.device)

    def staged(self, shape, prec):
        key = (tuple(sorted(shape.items())), prec)
        if self.inputs is None or self.inputs[0] != key:
            self.drop_inputs()  # before the next inputs are made: never two sets at once
            self.gen.manual_seed(self.args.seed)
            qk = (shape["batch"], shape["heads"], shape["seq"], shape["dk"])
            vo = (shape["batch"], shape["heads"], shape["seq"], shape["dv"])
            tensors = [self.torch.randn(s, device=self.device, dtype=self.dtypes[prec], generator=self.gen)
                       for s in (qk, qk, vo, vo)]
            self.inputs = (key, tensors)
        return self.inputs[1]

    def cell(self, peer, shape, prec, mode, causality):
        torch, args = self.torch, self.args
        cell = {
            "backend": f"peer/{peer.name}/{prec}", "device": self.device, "precision": prec,
            "algorithm": peer.algorithm, "form": peer.form, "mode": mode, "shape": dict(shape),
            "causality": causality, "map": "elu+1", "eps": DEFAULT_EPS, "decay": 1.0,
            "status": "error", "message": None, "samples_s": [],
        }
        # Predictions and stops hold within one (B, H, D, M): only N changes along a series.
        series = (peer.name, prec, mode, causality, shape["batch"], shape["heads"], shape["dk"], shape["dv"])
        seq = shape["seq"]
        if peer.available is not None:
            cell.update(status="unavailable", message=f"skipped: {peer.available}")
            return cell
        if causality not in peer.causalities:
            cell.update(status="unsupported",
                        message=f"unsupported: {peer.name} computes {'/'.join(peer.causalities)} only")
            return cell
        if series in self.stopped and self.stopped[series][0] <= seq:  # shapes may come in any order
            s_seq, s_status = self.stopped[series]
            cell.update(status=s_status, message=f"not run: N={s_seq} was already {s_status}")
            return cell
        if series in self.last and self.last[series][0] < seq:
            p_seq, p_med = self.last[series]
            expo = 2 if peer.algorithm == "softmax" else 1
            runs = min(args.warmup, 1) + (args.repeats or args.min_repeats)
            predicted = p_med * (seq / p_seq) ** expo * runs
            if predicted > args.max_cell_seconds:
                self.stopped[series] = (seq, "too-slow")
                cell.update(status="too-slow",
                            message=f"skipped: predicted {predicted:.1f} s ({runs} runs) "
                                    f"from N={p_seq}, above --max-cell-seconds {args.max_cell_seconds}")
                return cell
        q = k = v = d_out = None
        try:
            q, k, v, d_out = self.staged(shape, prec)
            if peer.layout == "bnhd":
                # Transposed outside the timing, as a caller in that layout would hold them.
                q, k, v, d_out = (t.transpose(1, 2).contiguous() for t in (q, k, v, d_out))
            if mode == "forward+backward":
                q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
            fn = peer.make_fn(causality == "causal")
            samples, fwd, bwd, peak = time_cell(torch, fn, q, k, v, d_out, mode, args, self.deadline)
        except Exception as e:  # noqa: BLE001 - every failure becomes a cell status
            q = k = v = d_out = None  # the caught frame holds them; released before the retry
            self.drop_inputs()
            first = str(e).splitlines()[0][:300] if str(e) else ""
            if is_oom(torch, e):
                self.stopped[series] = (seq, "oom")
                cell.update(status="oom", message=f"out of memory: {first}")
            elif isinstance(e, RuntimeError) and "No available kernel" in str(e):
                cell.update(status="unsupported", message=f"unsupported: {first}")
            else:
                cell.update(status="error", message=f"{type(e).__name__}: {first}")
            return cell
        finally:
            q = k = v = d_out = None
        st = sample_stats(samples)
        if st is None:
            cell.update(status="error", message="no finite samples")
            return cell
        self.last[series] = (seq, st["median"])
        med = st["median"]
        b, h, d, m = shape["batch"], shape["heads"], shape["dk"], shape["dv"]
        elem = torch.tensor([], dtype=self.dtypes[prec]).element_size()
        gbps = minimal_bytes(b, h, seq, d, m, elem, mode) / med / 1e9
        copy = self.copy_gbps
        cell.update(
            status="ok",
            message=peer.note,
            samples_s=samples,
            median_s=med,
            min_s=st["min"],
            max_s=st["max"],
            mean_s=st["mean"],
            rel_stdev=st["rel_stdev"],
            forward_median_s=sample_stats(fwd)["median"] if mode != "forward" else None,
            backward_median_s=sample_stats(bwd)["median"] if mode != "forward" else None,
            peak_bytes=peak,
            peak_bytes_source="torch-allocator" if peak is not None else None,
            free_mem_drop_bytes=None,
            tokens_per_s=b * seq / med,
            tflops=flops(peer.algorithm, b, h, seq, d, m, mode) / med / 1e12,
            gbps=gbps,
            pct_of_copy=finite_or_none(100.0 * gbps / copy) if copy else None,
        )
        print(f"{cell['backend']} {mode} {shape_text(shape)}: {med * 1e3:.3f} ms", file=sys.stderr)
        return cell


if __name__ == "__main__":
    main()
