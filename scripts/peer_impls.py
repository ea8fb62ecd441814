"""The peer implementations scripts/peers.py times. Each peer is a name, what it computes and
a factory of callables (q, k, v) -> o; peers.py owns the sweep and the results file. Kept
apart so peers.py stays about running cells, and so --peers can be checked (PEER_NAMES)
without importing torch.

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

Linear-attention peers apply elu(x)+1 to q and k before the call (linattn's default map);
fla is called with normalize=True, which divides by the running key sum like linattn's
normaliser (fla adds no epsilon, linattn adds 1e-6: a negligible difference for timing),
and scale=1 (linattn has no 1/sqrt(D) scale). fla gets its inputs as [B, N, H, D], transposed
outside the timing; every other peer takes [B, H, N, D] like linattn.
"""

DEFAULT_EPS = 1e-6

# Every peer build_peers makes, in its order: what --peers accepts.
PEER_NAMES = (
    "fla-chunk", "fla-fused-recurrent", "sdpa-flash", "sdpa-cudnn", "torch-linear-cumsum",
    "torch-linear-chunk", "fla-naive-chunk", "torch-linear-einsum",
)


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
    names = tuple(p.name for p in peers)
    if names != PEER_NAMES:
        raise RuntimeError(f"peer_impls.PEER_NAMES {PEER_NAMES} is out of step with build_peers {names}")
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
