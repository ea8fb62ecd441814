"""Tests of the peer-timing scripts' host-side logic (no PyTorch, no GPU needed):
peer_timing.warm_up's settling rule and gpu_summary's ratio table (noisy cells marked).
Run: python3 -m unittest discover -s scripts -p 'test_*.py' (CI does)."""

import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gpu_summary  # noqa: E402
from peer_timing import warm_up  # noqa: E402


class Peer:
    """A fake call whose n-th run takes times[n] seconds (the last one ever after)."""

    def __init__(self, times):
        self.times = times
        self.calls = 0

    def __call__(self):
        t = self.times[min(self.calls, len(self.times) - 1)]
        self.calls += 1
        return t, 0.0


def never():
    return False


class WarmUp(unittest.TestCase):
    def test_settling_peer_is_warmed_until_it_stops_speeding_up(self):
        # The H100 run of 2026-11-27: fla's fwd+bwd after its compile call (ms).
        peer = Peer([40.0, 19.8, 15.7, 7.1, 5.9, 5.3, 5.31, 5.3])
        calls = warm_up(peer, 3, 10.0, never)
        # 5.31 is the first within 10% of the call before it.
        self.assertEqual(calls, 7)

    def test_steady_peer_takes_exactly_the_count(self):
        peer = Peer([30.0, 1.0, 1.0, 1.0, 1.0])
        self.assertEqual(warm_up(peer, 3, 10.0, never), 3)

    def test_count_one_still_compares_two_warm_calls(self):
        peer = Peer([30.0, 1.0, 1.0])
        self.assertEqual(warm_up(peer, 1, 10.0, never), 3)

    def test_time_bound_ends_a_peer_that_never_settles(self):
        # Every call 20% faster than the one before: only the time bound stops it.
        peer = Peer([0.0] + [0.5 ** (i / 4) for i in range(10000)])
        calls = warm_up(peer, 3, 0.0, never)
        self.assertEqual(calls, 3)

    def test_no_warm_up_and_deadline(self):
        self.assertEqual(warm_up(Peer([1.0]), 0, 10.0, never), 0)
        self.assertEqual(warm_up(Peer([1.0]), 3, 10.0, lambda: True), 0)


def cell(backend, median_ms, rel, n=5):
    return {"backend": backend, "mode": "forward+backward", "causality": "causal",
            "shape": {"batch": 2, "seq": 16384, "heads": 16, "dk": 128, "dv": 128},
            "status": "ok", "median_s": median_ms / 1e3, "rel_stdev": rel,
            "samples_s": [median_ms / 1e3] * n}


class Ratios(unittest.TestCase):
    def table(self, cells):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.json")
            with open(path, "w") as f:
                json.dump({"cells": cells}, f)
            args = SimpleNamespace(files=[path], out=None, num="cuda/causal_chunked/bf16",
                                   den="peer/fla-chunk/bf16")
            out = io.StringIO()
            with redirect_stdout(out):
                gpu_summary.ratios(args)
            return out.getvalue()

    def test_noisy_cell_is_marked_with_its_spread(self):
        text = self.table([cell("cuda/causal_chunked/bf16", 3.911, 0.007, 56),
                           cell("peer/fla-chunk/bf16", 7.128, 0.61, 5)])
        self.assertIn("7.128 (±61%, n=5)", text)
        self.assertIn("3.911 ", text)
        self.assertNotIn("3.911 (±", text)
        self.assertIn("0.55x", text)
        self.assertIn("not a settled time", text)

    def test_quiet_cells_carry_no_mark(self):
        text = self.table([cell("cuda/causal_chunked/bf16", 3.911, 0.007),
                           cell("peer/fla-chunk/bf16", 5.063, 0.05)])
        self.assertNotIn("±", text)
        self.assertNotIn("settled", text)


if __name__ == "__main__":
    unittest.main()
