"""The dflash_tune operators on a GPU: every operator against a float64 reference on fresh random inputs with the
families' tolerance rules (attention: max-abs error within 2x the plain-bf16 emulation's + 2 bf16 half-ulps of the
largest output + 1e-4; gated delta rule: relative L2 error 2e-2; conv1d: 1e-5 + |ref| / 128), the attention forward
and backward, packed sequences, the gated delta rule against flash-linear-attention's chunk_gated_delta_rule when
fla imports, under torch.compile (torch._dynamo.explain: no graph break) and inside a captured CUDA graph.
The kernels come from $DFLASH_CACHE_DIR; missing keys are tuned on first use (tune_missing=True), so a fresh cache
tunes the small shapes here first (a few minutes). Needs a CUDA GPU (python_tests.sh skips without one)."""
import os
import unittest

import torch
import torch.nn.functional as F

import dflash_tune
from dflash_tune import ops

DEV = torch.device("cuda")
BF16 = torch.bfloat16


def half_ulp(x: float) -> float:
    """Half the spacing of bf16 values at |x| (attention_tolerance.h's Bf16HalfUlp)."""
    if x == 0:
        return 0.0
    import math
    return 2.0 ** (math.floor(math.log2(abs(x))) - 8)


def dflash_mask(anchors, valid, ctx_len, block_size, window, doc_start=None):
    """[N*bs, ctx_len + N*bs] bool allow-mask of one row (the spec's DFlash block masks)."""
    n = anchors.numel()
    q = torch.arange(n * block_size, device=anchors.device)
    kv = torch.arange(ctx_len + n * block_size, device=anchors.device)
    qb, qo = (q // block_size)[:, None], (q % block_size)[:, None]
    anchor = anchors.long()[qb]
    ctx = (kv[None] < ctx_len) & (kv[None] < anchor)
    if window:
        ctx &= kv[None] >= anchor + qo - (window - 1)
    if doc_start is not None:
        ctx &= kv[None] >= doc_start.long()[qb]
    draft = (kv[None] >= ctx_len) & ((kv[None] - ctx_len) // block_size == qb)
    if window:
        draft &= (kv[None] - ctx_len) % block_size <= qo
    return (ctx | draft) & valid.bool()[qb]


def dense_attention(q, k, v, mask, scale):
    """softmax(scale q k^T + mask) v per row in q's dtype math ([B, rows, H, D]), fully masked rows 0."""
    groups = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(groups, dim=2)
    v = v.repeat_interleave(groups, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k).float() * scale
    s = s.masked_fill(~mask[:, None], float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0).to(q.dtype)
    return torch.einsum("bhqk,bkhd->bqhd", p, v)


def close(test, got, want, what):
    """Equal up to the order of floating-point sums (the backward may reduce dQ with atomics)."""
    err = (got.double() - want.double()).abs().max().item()
    test.assertLessEqual(err, 1e-2 * want.double().abs().max().item() + 1e-6, f"{what}: max diff {err}")


class Case:
    def __init__(self, batch=2, ctx_len=256, blocks=8, block_size=16, hq=4, hkv=2, d=128, window=0, packed=False,
                 seed=0):
        g = torch.Generator(device=DEV).manual_seed(seed)
        self.ctx_len, self.block_size, self.window = ctx_len, block_size, window
        rows, kv = blocks * block_size, ctx_len + blocks * block_size
        self.q = torch.randn(batch, rows, hq, d, device=DEV, generator=g).to(BF16)
        self.k = torch.randn(batch, kv, hkv, d, device=DEV, generator=g).to(BF16)
        self.v = torch.randn(batch, kv, hkv, d, device=DEV, generator=g).to(BF16)
        self.dout = torch.randn(batch, rows, hq, d, device=DEV, generator=g).to(BF16)
        anchors = torch.sort(torch.randint(1, ctx_len, (batch, blocks), device=DEV, generator=g), dim=1).values
        valid = torch.ones(batch, blocks, dtype=torch.bool, device=DEV)
        valid[0, -2:] = False  # invalid blocks last: rows 0, zero gradients
        self.anchors = torch.where(valid, anchors, 0).to(torch.int32)
        self.valid = valid
        self.doc_start = None
        if packed:  # two documents a row: blocks anchored in the second see only its context
            self.doc_start = torch.where(self.anchors > ctx_len // 2, ctx_len // 2, 0).to(torch.int32)
        self.mask = torch.stack([dflash_mask(self.anchors[b], valid[b], ctx_len, block_size, window,
                                             None if self.doc_start is None else self.doc_start[b])
                                 for b in range(batch)])
        self.scale = d ** -0.5

    def ours(self, q, k, v, **kw):
        return ops.dflash_attention(q, k, v, self.anchors, self.valid, block_size=self.block_size,
                                    ctx_len=self.ctx_len, sliding_window=self.window or None,
                                    doc_start=self.doc_start, tune_missing=True, **kw)


def within_attention_tolerance(test, name, got, ref, plain):
    err = (got.double() - ref).abs().max().item()
    base = (plain.double() - ref).abs().max().item()
    tol = 2 * base + 2 * half_ulp(ref.abs().max().item()) + 1e-4
    test.assertTrue(torch.isfinite(got).all(), name)
    test.assertLessEqual(err, tol, f"{name}: err {err} > tolerance {tol} (plain bf16 {base})")


class AttentionTest(unittest.TestCase):
    def check(self, case):
        leaves = [t.clone().requires_grad_() for t in (case.q, case.k, case.v)]
        o = case.ours(*leaves)
        o.backward(case.dout)
        ref_in = [t.double().requires_grad_() for t in (case.q, case.k, case.v)]
        ref = dense_attention(*ref_in, case.mask, case.scale)
        ref.backward(case.dout.double())
        plain_in = [t.clone().requires_grad_() for t in (case.q, case.k, case.v)]
        plain = dense_attention(*plain_in, case.mask, case.scale)
        plain.backward(case.dout)
        within_attention_tolerance(self, "O", o, ref.detach(), plain.detach())
        for name, a, r, p in zip(("dQ", "dK", "dV"), leaves, ref_in, plain_in):
            within_attention_tolerance(self, name, a.grad, r.grad, p.grad)
        self.assertEqual(o[0, -2 * case.block_size:].abs().max().item(), 0.0)  # invalid blocks
        self.assertEqual(leaves[0].grad[0, -2 * case.block_size:].abs().max().item(), 0.0)

    def test_full_mask_forward_and_backward_match_float64(self):
        self.check(Case())

    def test_sliding_window_forward_and_backward_match_float64(self):
        self.check(Case(window=64, seed=1))

    def test_packed_rows_forward_and_backward_match_float64(self):
        self.check(Case(packed=True, seed=2))

    def test_bhsd_layout_gives_the_bshd_result(self):
        case = Case(seed=3)
        o = case.ours(case.q, case.k, case.v)
        o2 = case.ours(case.q.transpose(1, 2).contiguous(), case.k.transpose(1, 2).contiguous(),
                       case.v.transpose(1, 2).contiguous(), layout="bhsd")
        self.assertTrue(torch.equal(o2.transpose(1, 2), o))

    def test_compiles_without_graph_breaks_and_matches_eager(self):
        case = Case(seed=4)

        def step(q, k, v):
            return case.ours(q, k, v).float().square().sum()

        explain = torch._dynamo.explain(step)(case.q, case.k, case.v)
        self.assertEqual(explain.graph_break_count, 0, str(explain.break_reasons))
        compiled = torch.compile(step, fullgraph=True)
        leaves = [t.clone().requires_grad_() for t in (case.q, case.k, case.v)]
        compiled(*leaves).backward()
        eager = [t.clone().requires_grad_() for t in (case.q, case.k, case.v)]
        step(*eager).backward()
        for a, b in zip(leaves, eager):
            close(self, a.grad, b.grad, "compiled vs eager gradient")

    def test_forward_and_backward_replay_in_a_cuda_graph(self):
        case = Case(seed=5)
        q, k, v = [t.clone().requires_grad_() for t in (case.q, case.k, case.v)]
        case.ours(q, k, v).backward(case.dout)  # loads the kernels (a capture cannot read the cache)
        want = [t.grad.clone() for t in (q, k, v)]
        for t in (q, k, v):
            t.grad = None
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            with torch.cuda.graph(graph):
                out = case.ours(q, k, v)
                out.backward(case.dout)
        torch.cuda.current_stream().wait_stream(stream)
        for t in (q, k, v):
            t.grad.zero_()
        graph.replay()
        torch.cuda.synchronize()
        for g, w in zip((q.grad, k.grad, v.grad), want):
            close(self, g, w, "replayed vs eager gradient")


def conv_reference(x, w, cu=None):
    """float64 causal depthwise conv (width 4) + SiLU over x [C, T], restarting at every document."""
    x, w = x.double(), w.double()
    bounds = [0, x.shape[1]] if cu is None else cu.tolist()
    out = torch.empty_like(x)
    for s, e in zip(bounds[:-1], bounds[1:]):
        y = F.conv1d(F.pad(x[:, s:e], (3, 0)).unsqueeze(0), w.unsqueeze(1), groups=x.shape[0])[0]
        out[:, s:e] = F.silu(y)
    return out


class ConvTest(unittest.TestCase):
    def check(self, y, ref):
        err = (y.double() - ref).abs()
        self.assertTrue(bool((err <= 1e-5 + ref.abs() / 128).all()), f"max err {err.max().item()}")

    def test_matches_float64_on_token_major_and_channel_major_inputs(self):
        g = torch.Generator(device=DEV).manual_seed(10)
        x_tm = torch.randn(2, 300, 256, device=DEV, generator=g).to(BF16).transpose(1, 2)  # transformers' layout
        w = torch.randn(256, 4, device=DEV, generator=g).to(BF16)
        y = ops.causal_conv1d(x_tm, w, tune_missing=True)
        for b in range(2):
            self.check(y[b], conv_reference(x_tm[b], w))
        y2 = ops.causal_conv1d(x_tm.contiguous(), w, tune_missing=True)
        self.assertTrue(torch.equal(y, y2))

    def test_packed_sequences_restart_at_each_document(self):
        g = torch.Generator(device=DEV).manual_seed(11)
        x = torch.randn(1, 500, 256, device=DEV, generator=g).to(BF16).transpose(1, 2)
        w = torch.randn(256, 4, device=DEV, generator=g).to(BF16)
        cu = torch.tensor([0, 120, 121, 380, 500], dtype=torch.int32)
        self.check(ops.causal_conv1d(x, w, cu_seqlens=cu, tune_missing=True)[0], conv_reference(x[0], w, cu))

    def test_compiles_without_graph_breaks_and_replays_in_a_cuda_graph(self):
        x = torch.randn(1, 256, 300, device=DEV).to(BF16)
        w = torch.randn(256, 4, device=DEV).to(BF16)
        fn = lambda x, w: ops.causal_conv1d(x, w, tune_missing=True) * 2  # noqa: E731
        explain = torch._dynamo.explain(fn)(x, w)
        self.assertEqual(explain.graph_break_count, 0, str(explain.break_reasons))
        want = fn(x, w)
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.cuda.graph(graph):
            out = fn(x, w)
        torch.cuda.current_stream().wait_stream(stream)
        graph.replay()
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(out, want))

    def test_warmup_fills_the_keys_the_operator_loads(self):
        shape = dict(tokens=96, channels=640)
        dflash_tune.warmup("causal_conv1d", **shape)  # the default arch: this GPU's (sm_90a on Hopper)
        self.assertEqual(dflash_tune.missing_kernels("causal_conv1d", **shape), [])
        x = torch.randn(1, 640, 96, device=DEV).to(BF16)
        w = torch.randn(640, 4, device=DEV).to(BF16)
        self.check(ops.causal_conv1d(x, w)[0], conv_reference(x[0], w))  # no tune_missing: the cache as warmed

    def test_a_missing_key_names_its_warmup_command(self):
        x = torch.randn(1, 1792, 64, device=DEV).to(BF16)  # a channel count nothing here tunes
        w = torch.randn(1792, 4, device=DEV).to(BF16)
        with self.assertRaises(dflash_tune.MissingKernelError) as caught:
            ops.causal_conv1d(x, w)
        self.assertIn("dflash-tune warmup --arch sm_", caught.exception.command)
        self.assertIn('"channels":1792', caught.exception.command)


def gdn_inputs(batch, tokens, heads=2, value_heads=4, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    r = lambda *s: torch.randn(*s, device=DEV, generator=g)  # noqa: E731
    return dict(q=r(batch, tokens, heads, 128).to(BF16), k=r(batch, tokens, heads, 128).to(BF16),
                v=r(batch, tokens, value_heads, 128).to(BF16), a=r(batch, tokens, value_heads).to(BF16),
                b=r(batch, tokens, value_heads).to(BF16), A_log=r(value_heads) * 0.5, dt_bias=r(value_heads) * 0.5)


def gates(t):
    g = -t["A_log"].double().exp() * F.softplus(t["a"].double() + t["dt_bias"].double())
    return g, torch.sigmoid(t["b"].double())


def gdn_reference(t, cu=None, g=None, beta=None, l2norm=True, h0=None):
    """float64 token-by-token gated delta rule (transformers' torch_recurrent_gated_delta_rule) per row or per
    document of cu: the gates from t's raw inputs unless g, beta are given; q, k L2-normalised when l2norm; the state
    starting at h0 [N, HV, 128, 128] (default 0). -> (o [B, T, HV, 128], final states [N, HV, 128, 128])."""
    if g is None:
        g, beta = gates(t)
    g, beta = g.double(), beta.double()
    q, k = t["q"].double(), t["k"].double()
    if l2norm:
        q, k = F.normalize(q, dim=-1, eps=1e-6), F.normalize(k, dim=-1, eps=1e-6)
    q = q * 128 ** -0.5
    v = t["v"].double()
    rep = v.shape[2] // q.shape[2]
    q, k = q.repeat_interleave(rep, dim=2), k.repeat_interleave(rep, dim=2)
    out, finals = torch.zeros_like(v), []
    bounds = [0, v.shape[1]] if cu is None else cu.tolist()
    for b in range(v.shape[0]):
        for d in range(len(bounds) - 1):
            n = b + d  # the sequence's index: the row, or the document (batch 1)
            state = (torch.zeros(v.shape[2], 128, 128, dtype=torch.float64, device=DEV) if h0 is None
                     else h0[n].double().clone())
            for i in range(bounds[d], bounds[d + 1]):
                state = state * g[b, i].exp()[:, None, None]
                kv = (state * k[b, i][:, :, None]).sum(1)
                delta = (v[b, i] - kv) * beta[b, i][:, None]
                state = state + k[b, i][:, :, None] * delta[:, None, :]
                out[b, i] = (state * q[b, i][:, :, None]).sum(1)
            finals.append(state)
    return out, torch.stack(finals)


def fla_gated_delta_rule():
    """flash-linear-attention's chunk_gated_delta_rule, or None when fla does not import."""
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        return chunk_gated_delta_rule
    except ImportError:
        return None


class GatedDeltaRuleTest(unittest.TestCase):
    def check(self, o, ref, what="o"):
        rel = ((o.double() - ref).norm() / ref.norm()).item()
        self.assertLess(rel, 2e-2, what)

    def test_matches_the_float64_recurrence(self):
        t = gdn_inputs(2, 200, seed=20)
        self.check(ops.gated_delta_rule(**t, tune_missing=True), gdn_reference(t)[0])

    def test_packed_sequences_restart_the_state(self):
        t = gdn_inputs(1, 300, seed=21)
        cu = torch.tensor([0, 64, 65, 230, 300], dtype=torch.int32)
        self.check(ops.gated_delta_rule(**t, cu_seqlens=cu, tune_missing=True), gdn_reference(t, cu)[0])

    def test_raw_gates_carry_initial_and_final_states(self):
        t = gdn_inputs(2, 130, seed=25)
        h0 = torch.randn(2, 4, 128, 128, device=DEV) * 0.1
        o, ht = ops.gated_delta_rule(**t, initial_state=h0, output_final_state=True, tune_missing=True)
        ref_o, ref_ht = gdn_reference(t, h0=h0)
        self.check(o, ref_o)
        self.check(ht, ref_ht, "final state")

    def fla_inputs(self, seed, tokens, l2norm):
        """Inputs of the FLA form: g fp32 (log decay), beta bf16; q, k unit rows (bf16) when the kernel does not
        normalise them (FLA's use_qk_l2norm_in_kernel=False), raw otherwise."""
        t = gdn_inputs(1, tokens, seed=seed)
        g, beta = gates(t)
        if not l2norm:
            t["q"], t["k"] = (F.normalize(t[n].float(), dim=-1).to(BF16) for n in ("q", "k"))
        return t, g.float(), beta.to(BF16)

    def test_fla_signature_matches_float64_packed_with_states(self):
        for l2norm in (True, False):
            with self.subTest(use_qk_l2norm_in_kernel=l2norm):
                t, g, beta = self.fla_inputs(26, 333, l2norm)
                cu = torch.tensor([0, 1, 64, 200, 333], dtype=torch.int32)
                h0 = torch.randn(4, 4, 128, 128, device=DEV) * 0.1
                o, ht = ops.chunk_gated_delta_rule(t["q"], t["k"], t["v"], g, beta, initial_state=h0,
                                                   output_final_state=True, cu_seqlens=cu,
                                                   use_qk_l2norm_in_kernel=l2norm, tune_missing=True)
                ref_o, ref_ht = gdn_reference(t, cu, g, beta, l2norm, h0)
                self.check(o, ref_o)
                self.check(ht, ref_ht, "final state")
        o, ht = ops.chunk_gated_delta_rule(t["q"], t["k"], t["v"], g, beta, cu_seqlens=cu, tune_missing=True)
        self.assertIsNone(ht)

    def test_fla_signature_matches_flash_linear_attention_on_the_same_inputs(self):
        fla = fla_gated_delta_rule()
        if fla is None:
            self.skipTest("flash-linear-attention does not import")
        rep = 2  # FLA is given q, k repeated to the value heads; ours groups them in the kernel
        for l2norm in (True, False):
            with self.subTest(use_qk_l2norm_in_kernel=l2norm):
                t, g, beta = self.fla_inputs(22, 700, l2norm)
                cu = torch.tensor([0, 100, 163, 700], dtype=torch.int32)
                h0 = torch.randn(3, 4, 128, 128, device=DEV) * 0.1
                kw = dict(initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=l2norm)
                o_fla, ht_fla = fla(t["q"].repeat_interleave(rep, 2), t["k"].repeat_interleave(rep, 2), t["v"], g,
                                    beta, cu_seqlens=cu.to(DEV, torch.long), **kw)
                o, ht = ops.chunk_gated_delta_rule(t["q"], t["k"], t["v"], g, beta, cu_seqlens=cu,
                                                   tune_missing=True, **kw)
                ref_o, ref_ht = gdn_reference(t, cu, g, beta, l2norm, h0)
                self.check(o_fla, ref_o, "fla o")
                self.check(ht_fla, ref_ht, "fla final state")
                self.check(o, o_fla.double(), "ours vs fla o")
                self.check(ht, ht_fla.double(), "ours vs fla final state")

    def test_compiles_without_graph_breaks(self):
        t = gdn_inputs(1, 128, seed=23)
        fn = lambda t: ops.gated_delta_rule(**t, tune_missing=True).float().sum()  # noqa: E731
        explain = torch._dynamo.explain(fn)(t)
        self.assertEqual(explain.graph_break_count, 0, str(explain.break_reasons))
        t, g, beta = self.fla_inputs(27, 128, True)
        fn = lambda t, g, beta: ops.chunk_gated_delta_rule(  # noqa: E731
            t["q"], t["k"], t["v"], g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True,
            tune_missing=True)[1].sum()
        explain = torch._dynamo.explain(fn)(t, g, beta)
        self.assertEqual(explain.graph_break_count, 0, str(explain.break_reasons))

    def test_refuses_inputs_that_need_gradients(self):
        t = gdn_inputs(1, 64, seed=24)
        t["v"].requires_grad_()
        with self.assertRaisesRegex(RuntimeError, "forward only"):
            ops.gated_delta_rule(**t)
        g, beta = (x.float().requires_grad_() for x in gates(t))
        with self.assertRaisesRegex(RuntimeError, "forward only"):
            ops.chunk_gated_delta_rule(t["q"], t["k"], t["v"].detach(), g, beta)


if __name__ == "__main__":
    unittest.main()
