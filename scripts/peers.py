#!/usr/bin/env python3
"""Time peer implementations at linattn's bench shapes and write linattn's results JSON.

Peers (backend names in the output):
  peer/fla-chunk/{f16,bf16}            fla.ops.linear_attn.chunk_linear_attn
  peer/fla-fused-recurrent/{f16,bf16}  fla.ops.linear_attn.fused_recurrent_linear_attn
  peer/sdpa-flash/{f16,bf16}           torch SDPA, flash backend
  peer/sdpa-cudnn/{f16,bf16}           torch SDPA, cuDNN backend
  peer/torch-linear-cumsum/{...}       plain PyTorch causal linear attention (cumsum of k v^T)
  peer/torch-linear-einsum/{...}       plain PyTorch non-causal linear attention (einsum)
  peer/torch-linear-chunk/f32          plain PyTorch causal chunk form (CPU; the form of
                                       flash-linear-attention's naive chunk reference, L=64)
  peer/fla-naive-chunk/f32             fla.ops.linear_attn.naive.naive_chunk_linear_attn (CPU,
                                       when fla is importable)

--device cpu (or auto on a machine without CUDA) times the CPU peers instead: f32, wall
clock (time.perf_counter) around each call, torch.set_num_threads(--threads) when given,
no peak memory (PyTorch keeps no CPU allocator statistics), copy bandwidth of a host copy.

Linear-attention peers apply elu(x)+1 to q and k before the call (linattn's default map);
fla is called with normalize=True, which divides by the running key sum like linattn's
normaliser (fla adds no epsilon, linattn adds 1e-6: a negligible difference for timing),
and scale=1 (linattn has no 1/sqrt(D) scale). fla gets its inputs as [B, N, H, D], transposed
outside the timing; every other peer takes [B, H, N, D] like linattn.

Timing: CUDA events around each call, inputs resident on the device, warm-up runs first,
then at least --min-repeats samples and more while within --cell-seconds (as linattn bench).
forward+backward = forward time + backward time of the same sample. Peak memory is
torch.cuda.max_memory_allocated above the allocation before the run.

Runs on the GPU machine (Python 3, PyTorch with CUDA; fla optional), or on any CPU. Cells that cannot run
are recorded as "unavailable" (fla not importable, SDPA backend absent), "unsupported"
(e.g. flash with this head dim), "oom" or "error"; the sweep goes on.
"""

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

SCHEMA_VERSION = 1
DEFAULT_EPS = 1e-6


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


def sample_stats(samples):
    xs = sorted(x for x in samples if math.isfinite(x))
    if not xs:
        return None
    n = len(xs)
    median = xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
    mean = sum(xs) / n
    if n > 1 and mean != 0:
        var = sum((x - mean) ** 2 for x in xs) / (n - 1)
        rel = math.sqrt(var) / abs(mean)
    else:
        rel = 0.0
    return {"median": median, "min": xs[0], "max": xs[-1], "mean": mean, "rel_stdev": rel}


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


class Peer:
    """One peer implementation: name, algorithm, form, which causalities it computes."""

    def __init__(self, name, algorithm, form, causalities, make_fn, available=None, note="",
                 layout="bhnd"):
        self.name = name
        self.layout = layout  # "bhnd" ([B, H, N, D]) or "bnhd" ([B, N, H, D])
        self.algorithm = algorithm
        self.form = form
        self.causalities = causalities
        self.make_fn = make_fn  # (causal) -> callable(q, k, v) -> o
        self.available = available  # None or "reason it is unavailable"
        self.note = note


def build_peers(torch, fla_mod, fla_error):
    import torch.nn.functional as F

    def phi(x):
        return F.elu(x) + 1.0

    peers = []

    # --- flash-linear-attention -------------------------------------------------------------
    def fla_call(fn_name):
        def make(causal):
            import inspect

            fn = getattr(fla_mod, fn_name)
            params = inspect.signature(fn).parameters
            extra = {"normalize": True}
            # linattn has no 1/sqrt(D) scale; with normalize=True it cancels anyway.
            if "scale" in params:
                extra["scale"] = 1.0
            # Inputs are handed over as [B, N, H, D]: the only layout of current fla, and
            # head_first=False selects it in releases that still have the switch.
            if "head_first" in params:
                extra["head_first"] = False

            def run(q, k, v):
                o = fn(phi(q), phi(k), v, **extra)
                return o[0] if isinstance(o, tuple) else o
            return run
        return make

    fla_reason = None if fla_mod is not None else f"fla not importable: {fla_error}"
    peers.append(Peer("fla-chunk", "linear", "chunked", ["causal"],
                      fla_call("chunk_linear_attn"), fla_reason,
                      "fla chunk_linear_attn, normalize=True, scale=1, elu+1 applied before, [B,N,H,D]",
                      layout="bnhd"))
    peers.append(Peer("fla-fused-recurrent", "linear", "recurrent", ["causal"],
                      fla_call("fused_recurrent_linear_attn"), fla_reason,
                      "fla fused_recurrent_linear_attn, normalize=True, scale=1, elu+1 applied before, [B,N,H,D]",
                      layout="bnhd"))

    # --- PyTorch SDPA with a pinned backend -----------------------------------------------------
    sdpa_kernel = None
    backends = {}
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel as _k
        sdpa_kernel = _k
        backends["sdpa-flash"] = SDPBackend.FLASH_ATTENTION
        if hasattr(SDPBackend, "CUDNN_ATTENTION"):
            backends["sdpa-cudnn"] = SDPBackend.CUDNN_ATTENTION
    except ImportError as e:
        sdpa_error = str(e)
    for name in ("sdpa-flash", "sdpa-cudnn"):
        reason = None
        if sdpa_kernel is None:
            reason = f"torch.nn.attention.sdpa_kernel missing: {sdpa_error}"
        elif name not in backends:
            reason = f"this torch has no {name} backend"

        def make(causal, name=name):
            backend = backends[name]

            def run(q, k, v):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            return run
        peers.append(Peer(name, "softmax", name, ["causal", "non-causal"], make, reason,
                          "torch scaled_dot_product_attention, backend pinned"))

    # --- plain PyTorch linear attention ------------------------------------------------------
    def make_cumsum(causal):
        def run(q, k, v):
            qf = phi(q).float()
            kf = phi(k).float()
            vf = v.float()
            # S_i = sum_{j<=i} k_j v_j^T materialised for every i: O(N·D·M) memory, the
            # straightforward autograd-friendly form.
            kv = torch.einsum("bhnd,bhnm->bhndm", kf, vf).cumsum(dim=2)
            z = kf.cumsum(dim=2)
            num = torch.einsum("bhnd,bhndm->bhnm", qf, kv)
            den = torch.einsum("bhnd,bhnd->bhn", qf, z).unsqueeze(-1) + DEFAULT_EPS
            return (num / den).to(q.dtype)
        return run

    def make_chunk(causal, chunk=64):
        # Causal linear attention by chunks: masked scores inside a chunk, the running state
        # (prefix sum over earlier chunks of K_c^T V_c) across them; the normaliser likewise.
        def run(q, k, v):
            b, h, n, d = q.shape
            m = v.shape[-1]
            pad = (-n) % chunk
            qf, kf, vf = phi(q).float(), phi(k).float(), v.float()
            if pad:
                qf, kf, vf = (F.pad(t, (0, 0, 0, pad)) for t in (qf, kf, vf))
            nc = (n + pad) // chunk
            qc, kc, vc = (t.reshape(b, h, nc, chunk, t.shape[-1]) for t in (qf, kf, vf))
            mask = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
            scores = (qc @ kc.transpose(-1, -2)).masked_fill(~mask, 0.0)
            kv = kc.transpose(-1, -2) @ vc  # per-chunk K_c^T V_c
            states = kv.cumsum(dim=2) - kv  # state before each chunk
            ksum = kc.sum(dim=3)
            zs = ksum.cumsum(dim=2) - ksum
            num = scores @ vc + qc @ states
            den = scores.sum(-1) + (qc @ zs.unsqueeze(-1)).squeeze(-1) + DEFAULT_EPS
            o = (num / den.unsqueeze(-1)).reshape(b, h, nc * chunk, m)[:, :, :n]
            return o.to(q.dtype)
        return run

    fla_naive_reason = fla_error_of(fla_mod, fla_error, "naive_chunk_linear_attn")

    def fla_naive(causal):
        from fla.ops.linear_attn.naive import naive_chunk_linear_attn

        def run(q, k, v):
            # fla's naive reference (fla >= 0.2) takes [B, N, H, D] (the peer's layout, so the
            # harness transposes outside the timing) and normalises like linattn.
            o = naive_chunk_linear_attn(phi(q), phi(k), v, scale=1.0, normalize=True)
            return o[0] if isinstance(o, tuple) else o
        return run

    def make_einsum(causal):
        def run(q, k, v):
            qf = phi(q).float()
            kf = phi(k).float()
            s = torch.einsum("bhnd,bhnm->bhdm", kf, v.float())
            z = kf.sum(dim=2)
            num = torch.einsum("bhnd,bhdm->bhnm", qf, s)
            den = torch.einsum("bhnd,bhd->bhn", qf, z).unsqueeze(-1) + DEFAULT_EPS
            return (num / den).to(q.dtype)
        return run

    peers.append(Peer("torch-linear-cumsum", "linear", "cumsum", ["causal"], make_cumsum, None,
                      "plain PyTorch, fp32 accumulation, elu+1"))
    peers.append(Peer("torch-linear-chunk", "linear", "chunked", ["causal"], make_chunk, None,
                      "plain PyTorch causal chunk form, L=64, fp32, elu+1"))
    peers.append(Peer("fla-naive-chunk", "linear", "chunked", ["causal"], fla_naive, fla_naive_reason,
                      "fla naive_chunk_linear_attn, normalize=True, scale=1, elu+1 applied before",
                      layout="bnhd"))
    peers.append(Peer("torch-linear-einsum", "linear", "noncausal", ["non-causal"], make_einsum,
                      None, "plain PyTorch, fp32 accumulation, elu+1"))
    return peers


def fla_error_of(fla_mod, fla_error, name):
    """Why fla's naive `name` cannot run here (None when it can)."""
    if fla_mod is None:
        return f"fla not importable: {fla_error}"
    try:
        import fla.ops.linear_attn.naive as naive
    except Exception as e:  # noqa: BLE001
        return f"fla.ops.linear_attn.naive not importable: {e}"
    return None if hasattr(naive, name) else f"fla has no {name}"


# Peers timed with --device cpu (the others need CUDA kernels or CUDA-only SDPA backends).
CPU_PEERS = {"torch-linear-einsum", "torch-linear-chunk", "fla-naive-chunk"}


class CudaClock:
    """Intervals of a call measured with CUDA events."""

    def __init__(self, torch):
        self.torch = torch
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]

    def mark(self, i):
        self.events[i].record()

    def seconds(self, i, j):
        self.torch.cuda.synchronize()
        return self.events[i].elapsed_time(self.events[j]) / 1e3


class CpuClock:
    """Intervals of a call measured with the wall clock (CPU work is synchronous)."""

    def __init__(self):
        self.t = [0.0, 0.0, 0.0]

    def mark(self, i):
        self.t[i] = time.perf_counter()

    def seconds(self, i, j):
        return self.t[j] - self.t[i]


def is_oom(torch, exc):
    if isinstance(exc, getattr(torch.cuda, "OutOfMemoryError", ())):
        return True
    return "out of memory" in str(exc).lower()


def time_cell(torch, fn, q, k, v, d_out, mode, args):
    """Returns (samples, forward_samples, backward_samples, peak_bytes or None)."""
    cuda = q.is_cuda
    if cuda:
        base_alloc = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    clock = CudaClock(torch) if cuda else CpuClock()

    def one():
        if mode == "forward":
            with torch.no_grad():
                clock.mark(0)
                o = fn(q, k, v)
                clock.mark(2)
            del o
            return clock.seconds(0, 2), 0.0
        for t in (q, k, v):
            t.grad = None
        clock.mark(0)
        o = fn(q, k, v)
        clock.mark(1)
        o.backward(d_out)
        clock.mark(2)
        del o
        return clock.seconds(0, 1), clock.seconds(1, 2)

    warm_start = time.perf_counter()
    for _ in range(args.warmup):
        one()
        if time.perf_counter() - warm_start >= args.cell_seconds:
            break
    samples, fwd, bwd = [], [], []
    t0 = time.perf_counter()
    while True:
        if args.repeats is not None:
            if len(samples) >= args.repeats:
                break
        elif len(samples) >= 1000 or (len(samples) >= args.min_repeats
                                      and time.perf_counter() - t0 >= args.cell_seconds):
            break
        f, b = one()
        samples.append(f + b)
        fwd.append(f)
        bwd.append(b)
    peak = max(0, torch.cuda.max_memory_allocated() - base_alloc) if cuda else None
    return samples, fwd, bwd, peak


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", help="sequence lengths, comma-separated (numbers or 2^k)")
    # Shape defaults are `linattn bench`'s, so `just table` puts like beside like.
    ap.add_argument("--n-min", default="2^10")
    ap.add_argument("--n-max", default="2^16")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dk", type=int, default=64)
    ap.add_argument("--dv", type=int, default=None)
    ap.add_argument("--precision", default="f16,bf16")
    ap.add_argument("--causality", default="causal")
    ap.add_argument("--mode", default="forward,forward+backward")
    ap.add_argument("--peers", default="", help="comma-separated peer names (default: all)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--min-repeats", type=int, default=5)
    ap.add_argument("--cell-seconds", type=float, default=1.0)
    ap.add_argument("--max-cell-seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                    help="cuda: the GPU peers; cpu: the CPU peers in f32; auto: cuda when visible")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    ap.add_argument("--out", required=True, help="results JSON path ('-' for stdout)")
    args = ap.parse_args()

    if args.n:
        seqs = parse_sizes(args.n)
    else:
        lo, hi = parse_sizes(args.n_min)[0], parse_sizes(args.n_max)[0]
        seqs = [1 << e for e in range(lo.bit_length() - 1, hi.bit_length()) if lo <= 1 << e <= hi]
    dv = args.dv or args.dk
    precisions = [p.strip() for p in args.precision.split(",") if p.strip()]
    causalities = [c.strip() for c in args.causality.split(",") if c.strip()]
    modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    for m in modes:
        if m not in ("forward", "forward+backward"):
            raise SystemExit(f"error: unknown mode '{m}'")

    try:
        import torch
    except ImportError as e:
        raise SystemExit(f"error: PyTorch is required: {e}")
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device visible to PyTorch")
    if device == "cpu":
        if args.threads:
            torch.set_num_threads(args.threads)
        if args.precision == ap.get_default("precision"):
            precisions = ["f32"]

    fla_mod, fla_error, fla_version = None, None, None
    try:
        import fla
        import fla.ops.linear_attn as fla_mod  # noqa: F811
        fla_version = getattr(fla, "__version__", "unknown")
    except Exception as e:  # ImportError, or a Triton/CUDA mismatch at import time
        fla_mod, fla_error = None, f"{type(e).__name__}: {e}"

    dtypes = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
    for p in precisions:
        if p not in dtypes:
            raise SystemExit(f"error: unknown precision '{p}'")

    peers = build_peers(torch, fla_mod, fla_error)
    if args.peers:
        wanted = {p.strip() for p in args.peers.split(",") if p.strip()}
        unknown = wanted - {p.name for p in peers}
        if unknown:
            raise SystemExit(f"error: unknown peers {sorted(unknown)}; known: {[p.name for p in peers]}")
        peers = [p for p in peers if p.name in wanted]
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

    cells = []
    stopped = {}  # series -> (seq, status) after oom / too-slow
    last = {}  # series -> (seq, median)
    gen = torch.Generator(device=device)
    for causality in causalities:
        for seq in seqs:
            for prec in precisions:
                dtype = dtypes[prec]
                elem = torch.tensor([], dtype=dtype).element_size()
                inputs = None
                for peer in peers:
                    for mode in modes:
                        cell = {
                            "backend": f"peer/{peer.name}/{prec}",
                            "device": device,
                            "precision": prec,
                            "algorithm": peer.algorithm,
                            "form": peer.form,
                            "mode": mode,
                            "shape": {"batch": args.batch, "heads": args.heads, "seq": seq,
                                      "dk": args.dk, "dv": dv},
                            "causality": causality,
                            "map": "elu+1",
                            "eps": DEFAULT_EPS,
                            "decay": 1.0,
                            "status": "error",
                            "message": None,
                            "samples_s": [],
                        }
                        cells.append(cell)
                        series = (peer.name, prec, mode, causality)
                        if peer.available is not None:
                            cell.update(status="unavailable", message=f"skipped: {peer.available}")
                            continue
                        if causality not in peer.causalities:
                            cell.update(status="unsupported",
                                        message=f"unsupported: {peer.name} computes {'/'.join(peer.causalities)} only")
                            continue
                        if series in stopped:
                            s_seq, s_status = stopped[series]
                            cell.update(status=s_status, message=f"not run: N={s_seq} was already {s_status}")
                            continue
                        if series in last:
                            p_seq, p_med = last[series]
                            expo = 2 if peer.algorithm == "softmax" else 1
                            runs = min(args.warmup, 1) + (args.repeats or args.min_repeats)
                            predicted = p_med * (seq / p_seq) ** expo * runs
                            if predicted > args.max_cell_seconds:
                                stopped[series] = (seq, "too-slow")
                                cell.update(status="too-slow",
                                            message=f"skipped: predicted {predicted:.1f} s ({runs} runs) "
                                                    f"from N={p_seq}, above --max-cell-seconds {args.max_cell_seconds}")
                                continue
                        try:
                            if inputs is None:
                                gen.manual_seed(args.seed)
                                shape_qk = (args.batch, args.heads, seq, args.dk)
                                shape_v = (args.batch, args.heads, seq, dv)
                                inputs = [torch.randn(s, device=device, dtype=dtype, generator=gen)
                                          for s in (shape_qk, shape_qk, shape_v, shape_v)]
                            q, k, v, d_out = inputs
                            if peer.layout == "bnhd":
                                # Transposed outside the timing, as a caller in that layout would hold them.
                                q, k, v, d_out = (t.transpose(1, 2).contiguous() for t in (q, k, v, d_out))
                            if mode == "forward+backward":
                                q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
                            fn = peer.make_fn(causality == "causal")
                            samples, fwd, bwd, peak = time_cell(torch, fn, q, k, v, d_out, mode, args)
                        except Exception as e:  # noqa: BLE001 - every failure becomes a cell status
                            empty_cache(torch, device)
                            if is_oom(torch, e):
                                stopped[series] = (seq, "oom")
                                cell.update(status="oom", message=f"out of memory: {str(e).splitlines()[0][:300]}")
                            elif isinstance(e, RuntimeError) and "No available kernel" in str(e):
                                cell.update(status="unsupported", message=f"unsupported: {str(e).splitlines()[0][:300]}")
                            else:
                                cell.update(status="error", message=f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
                            continue
                        finally:
                            q = k = v = d_out = None
                        st = sample_stats(samples)
                        if st is None:
                            cell.update(status="error", message="no finite samples")
                            continue
                        last[series] = (seq, st["median"])
                        med = st["median"]
                        gbps = minimal_bytes(args.batch, args.heads, seq, args.dk, dv, elem, mode) / med / 1e9
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
                            tokens_per_s=args.batch * seq / med,
                            tflops=flops(peer.algorithm, args.batch, args.heads, seq, args.dk, dv, mode) / med / 1e12,
                            gbps=gbps,
                            pct_of_copy=finite_or_none(100.0 * gbps / copy_bw["median_gbps"]) if copy_bw else None,
                        )
                        print(f"{cell['backend']} {mode} N={seq}: {med * 1e3:.3f} ms", file=sys.stderr)
                inputs = None
                empty_cache(torch, device)

    result = {
        "schema_version": SCHEMA_VERSION,
        "environment": environment,
        "grid": {
            "seq": seqs, "batch": [args.batch], "heads": [args.heads], "dk": [args.dk], "dv": [dv],
            "causality": causalities, "map": ["elu+1"], "backends": [f"peer/{p.name}" for p in peers],
            "precision": precisions, "mode": modes, "eps": DEFAULT_EPS, "decay": 1.0,
            "warmup": args.warmup, "repeats": args.repeats, "min_repeats": args.min_repeats,
            "cell_seconds": args.cell_seconds, "max_cell_seconds": args.max_cell_seconds,
            "flush_l2": False, "seed": args.seed,
        },
        "copy_bandwidth": [copy_bw] if copy_bw else [],
        "cells": cells,
    }
    text = json.dumps(finite_only(result), indent=2, allow_nan=False) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        write_atomic(args.out, text)
        print(f"results written to {args.out}", file=sys.stderr)


def empty_cache(torch, device):
    if device == "cuda":
        torch.cuda.empty_cache()


def measure_copy_bandwidth(torch, device, repeats=10):
    """Copy of min(1 GiB, free/4) on the device (256 MiB on the host), read + write bytes."""
    try:
        if device == "cuda":
            free, _ = torch.cuda.mem_get_info()
            nbytes = min(1 << 30, free // 4)
        else:
            nbytes = 256 << 20
        src = torch.empty(nbytes, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        dst.copy_(src)
        clock = CudaClock(torch) if device == "cuda" else CpuClock()
        samples = []
        for _ in range(repeats):
            clock.mark(0)
            dst.copy_(src)
            clock.mark(2)
            secs = clock.seconds(0, 2)
            if secs > 0:
                samples.append(2.0 * nbytes / secs / 1e9)
        del src, dst
        empty_cache(torch, device)
        st = sample_stats(samples)
        if st is None:
            return None
        return {"device": device, "bytes": nbytes, "samples_gbps": samples, "median_gbps": st["median"]}
    except Exception as e:  # noqa: BLE001
        print(f"warning: copy bandwidth not measured: {e}", file=sys.stderr)
        return None


if __name__ == "__main__":
    main()
