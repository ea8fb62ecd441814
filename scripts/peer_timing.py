"""Timing primitives of scripts/peers.py: clocks (CUDA events, wall clock), one cell's
warm-up and samples, the copy-bandwidth reference, sample statistics.

Timing: CUDA events around each call, inputs resident on the device, warm-up runs first,
then at least --min-repeats samples and more while within --cell-seconds (as linattn bench).
forward+backward = forward time + backward time of the same sample. Peak memory is
torch.cuda.max_memory_allocated above the allocation before the run. On the CPU: the wall
clock (time.perf_counter) around each call, no peak memory (PyTorch keeps no CPU allocator
statistics), copy bandwidth of a host copy.
"""

import math
import sys
import time


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


# A warm-up call more than this fraction faster than the one before it means the peer is
# still settling (autotuning, allocator growth, clocks): warm up once more.
SETTLING = 0.10


def warm_up(one, count, seconds, past_deadline):
    """Runs `one` (a call returning (forward, backward) seconds) until the peer runs warm:
    at least `count` calls, the first of which compiles and autotunes (fla's Triton kernels:
    seconds to a minute) and so does not start the `seconds` bound; then more until a call is
    no more than SETTLING faster than the one before it, within `seconds` of the first
    call's end. Stops at the deadline. Returns the number of calls made.

    Why: on the H100 run of 2026-11-27 the first call alone used up the 0.3 s bound, and
    fla's forward+backward at (2, 16384, 16, 128) was then sampled while it still sped up
    (19.8, 15.7, 7.1, 5.9, 5.3 ms): a median of 7.1 ms where the warm time is ~5.3.
    """
    if count <= 0 or past_deadline():
        return 0
    one()
    calls, start, prev, settled = 1, time.perf_counter(), None, False
    while not past_deadline():
        if calls >= count and (settled or time.perf_counter() - start >= seconds):
            break
        f, b = one()
        calls += 1
        now = f + b
        settled = prev is not None and now >= prev / (1 + SETTLING)
        prev = now
    return calls


def time_cell(torch, fn, q, k, v, d_out, mode, args, deadline):
    """Returns (samples, forward_samples, backward_samples, peak_bytes or None).

    `deadline` (a time.perf_counter() value or None): warm-up stops at it, and sampling stops
    at it once --min-repeats samples are in (fewer would not make a median worth keeping).
    """
    cuda = q.is_cuda
    if cuda:
        base_alloc = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    clock = CudaClock(torch) if cuda else CpuClock()

    def past_deadline():
        return deadline is not None and time.perf_counter() >= deadline

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

    warm_up(one, args.warmup, args.cell_seconds, past_deadline)
    samples, fwd, bwd = [], [], []
    t0 = time.perf_counter()
    while True:
        if args.repeats is not None:
            if len(samples) >= args.repeats:
                break
        elif len(samples) >= 1000 or (len(samples) >= args.min_repeats
                                      and (time.perf_counter() - t0 >= args.cell_seconds
                                           or past_deadline())):
            break
        f, b = one()
        samples.append(f + b)
        fwd.append(f)
        bwd.append(b)
    peak = max(0, torch.cuda.max_memory_allocated() - base_alloc) if cuda else None
    return samples, fwd, bwd, peak


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

