"""The dflash_tune operators, with the signatures of the code people already have.

  dflash_attention      the DFlash drafter attention (block masks over anchors; full or sliding window; packed rows
                        by document starts), differentiable (our forward and backward kernels), bf16, GQA
  gated_delta_rule      the Qwen3.5 gated delta rule from its raw gate inputs (a, b, A_log, dt_bias), forward only
  chunk_gated_delta_rule  flash-linear-attention's ``chunk_gated_delta_rule`` (precomputed g, beta; its keyword
                        arguments), forward only
  causal_conv1d         causal depthwise conv1d + SiLU, ``causal_conv1d_fn``'s semantics (x [B, C, T], weight
                        [C, 4]), forward only

Each is one ``torch.ops.dflash_tune`` operator per call (TORCH_LIBRARY: traced by torch.compile without graph
breaks through its fake implementation, capturable in CUDA graphs once its kernels are loaded), launching the tuned
winner from the kernel cache; batch rows run one after the other. Inputs are checked here, with one-line errors:
TypeError for a dtype, ValueError for a device or a shape. A kernel the cache lacks raises
dflash_tune.MissingKernelError with the exact ``dflash-tune warmup`` command, unless ``tune_missing=True`` (tunes
it in place, single flight with other processes).
"""
from typing import Optional

import torch

from ._errors import from_text

_ops = torch.ops.dflash_tune


def _call(op, *args):
    """op(*args), a missing key's RuntimeError raised as MissingKernelError (eager mode; compiled code sees the
    RuntimeError with the same text)."""
    if torch.compiler.is_compiling():
        return op(*args)
    try:
        return op(*args)
    except RuntimeError as e:
        missing = from_text(str(e))
        if missing is None:
            raise
        raise missing from None


def _check(t, name: str, dtype, dims: int):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"dflash_tune: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"dflash_tune: {name} must be {dtype}, got {t.dtype}")
    if t.dim() != dims:
        raise ValueError(f"dflash_tune: {name} must have {dims} dims, got shape {tuple(t.shape)}")


def _check_index(t, name: str, shape):
    if not isinstance(t, torch.Tensor) or t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"dflash_tune: {name} must be an int32/int64 tensor, got "
                        f"{t.dtype if isinstance(t, torch.Tensor) else type(t).__name__}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"dflash_tune: {name} must be shaped {tuple(shape)}, got {tuple(t.shape)}")


def _check_devices(**tensors):
    """Every tensor on the first one's CUDA device (checked after the dtypes and shapes)."""
    first_name, first = next(iter(tensors.items()))
    if first.device.type != "cuda":
        raise ValueError(f"dflash_tune: {first_name} must be on a CUDA device, got {first.device}")
    for name, t in tensors.items():
        if t is not None and t.device != first.device:
            raise ValueError(f"dflash_tune: {name} is on {t.device}, {first_name} on {first.device}")


def _no_grad_needed(name: str, *tensors):
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise RuntimeError(f"dflash_tune.{name} is forward only (its kernel family has no backward); call it under "
                           "torch.no_grad() or on tensors that do not require grad")


def dflash_attention(q, k, v, anchors, block_valid=None, *, block_size: int = 16, ctx_len: int,
                     sliding_window: Optional[int] = None, doc_start=None, scale: Optional[float] = None,
                     layout: str = "bshd", tune_missing: bool = False):
    """softmax(scale q k^T + DFlash block mask) v for N blocks of ``block_size`` query rows per batch row.

    layout "bshd": q [B, N*block_size, Hq, D], k and v [B, ctx_len + N*block_size, Hkv, D]; "bhsd": the same with
    heads before rows (as flex_attention takes them). bf16, Hq a multiple of Hkv, D 64/128/256 (backward 64/128).
    KV rows [0, ctx_len) are the context, then the blocks' own rows. anchors [B, N] int: block j sees the context
    before anchors[j] and its own block (valid blocks first, ascending); block_valid [B, N] bool (default all
    valid; an invalid block's rows are 0 with zero gradients); sliding_window: the sliding layers' window (context
    rows >= anchor + r - (window - 1), causal inside the block); doc_start [B, N] int: packed rows, each block's
    context also bounded below by its document's start. scale defaults to D**-0.5. Returns o in q's layout.
    """
    if layout not in ("bshd", "bhsd"):
        raise ValueError(f"dflash_tune: layout must be 'bshd' or 'bhsd', got {layout!r}")
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        _check(t, name, torch.bfloat16, 4)
    if layout == "bhsd":
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    batch, rows, heads_q, head_dim = q.shape
    if k.shape != v.shape or k.shape[0] != batch or k.shape[3] != head_dim:
        raise ValueError(f"dflash_tune: k and v must be [B, kv rows, Hkv, D] like q's B={batch}, D={head_dim}; got "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    if heads_q % k.shape[2] != 0:
        raise ValueError(f"dflash_tune: Hq={heads_q} must be a multiple of Hkv={k.shape[2]}")
    if block_size <= 0 or rows % block_size != 0:
        raise ValueError(f"dflash_tune: q's {rows} rows are not whole blocks of {block_size}")
    num_blocks = rows // block_size
    if k.shape[1] != ctx_len + rows:
        raise ValueError(f"dflash_tune: k and v must have ctx_len + N*block_size = {ctx_len + rows} rows, got "
                         f"{k.shape[1]}")
    _check_index(anchors, "anchors", (batch, num_blocks))
    if block_valid is None:
        block_valid = torch.ones((batch, num_blocks), dtype=torch.bool, device=q.device)
    elif not isinstance(block_valid, torch.Tensor) or tuple(block_valid.shape) != (batch, num_blocks):
        raise ValueError(f"dflash_tune: block_valid must be a [B, N] = {(batch, num_blocks)} tensor")
    if doc_start is not None:
        _check_index(doc_start, "doc_start", (batch, num_blocks))
    window = 0 if sliding_window is None else int(sliding_window)
    if window < 0:
        raise ValueError(f"dflash_tune: sliding_window must be positive, got {window}")
    _check_devices(q=q, k=k, v=v, anchors=anchors, block_valid=block_valid, doc_start=doc_start)
    scale = head_dim ** -0.5 if scale is None else float(scale)
    o, _ = _call(_ops.attention_fwd, q, k, v, anchors, block_valid, doc_start, ctx_len, block_size, window, scale,
                 tune_missing)
    return o.transpose(1, 2) if layout == "bhsd" else o


def _attention_setup_context(ctx, inputs, output):
    q, k, v, anchors, block_valid, doc_start, ctx_len, block_size, window, scale, tune_missing = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, anchors, block_valid, doc_start)
    ctx.args = (ctx_len, block_size, window, scale, tune_missing)
    ctx.mark_non_differentiable(lse)


def _attention_backward(ctx, grad_o, grad_lse):
    q, k, v, o, lse, anchors, block_valid, doc_start = ctx.saved_tensors
    ctx_len, block_size, window, scale, tune_missing = ctx.args
    dq, dk, dv = _call(_ops.attention_bwd, grad_o, q, k, v, o, lse, anchors, block_valid, doc_start, ctx_len,
                       block_size, window, scale, tune_missing)
    return dq, dk, dv, None, None, None, None, None, None, None, None


torch.library.register_autograd("dflash_tune::attention_fwd", _attention_backward,
                                setup_context=_attention_setup_context)


def _check_gdn_qkv(q, k, v):
    """-> (batch, tokens, heads, value_heads) of the gated delta rule's q, k [B, T, H, 128], v [B, T, HV, 128]."""
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        _check(t, name, torch.bfloat16, 4)
    batch, tokens, heads, head_dim = q.shape
    value_heads = v.shape[2]
    if k.shape != q.shape or head_dim != 128 or v.shape[:2] != (batch, tokens) or v.shape[3] != 128:
        raise ValueError(f"dflash_tune: q, k must be [B, T, H, 128] and v [B, T, HV, 128], got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if value_heads % heads != 0:
        raise ValueError(f"dflash_tune: HV={value_heads} must be a multiple of H={heads}")
    return batch, tokens, heads, value_heads


def _check_states(initial_state, num_seqs: int, value_heads: int):
    if initial_state is None:
        return
    if not isinstance(initial_state, torch.Tensor) or not initial_state.is_floating_point():
        raise TypeError("dflash_tune: initial_state must be a float tensor [N, HV, 128, 128]")
    if tuple(initial_state.shape) != (num_seqs, value_heads, 128, 128):
        raise ValueError(f"dflash_tune: initial_state must be [N, HV, 128, 128] = {(num_seqs, value_heads, 128, 128)} "
                         f"(N: one per sequence), got {tuple(initial_state.shape)}")


def gated_delta_rule(q, k, v, a, b, A_log, dt_bias, cu_seqlens=None, *, initial_state=None,
                     output_final_state: bool = False, scale: Optional[float] = None, tune_missing: bool = False):
    """The Qwen3.5 gated delta net's recurrence (transformers' Qwen3_5GatedDeltaNet after its conv), forward only.

    q, k [B, T, H, 128], v [B, T, HV, 128] bf16 (HV a multiple of H; value head j uses key head j // (HV // H)),
    a, b [B, T, HV] bf16 (the raw gate inputs), A_log and dt_bias [HV] fp32. Inside: g = -exp(A_log) *
    softplus(a + dt_bias), beta = sigmoid(b), q and k L2-normalised (eps 1e-6), q scaled by ``scale`` (default
    128**-0.5), fp32 state starting at ``initial_state`` [N, HV, 128 (K), 128 (V)] (default 0) for each of the N
    sequences: the batch rows, or the documents of cu_seqlens [N + 1] int at batch 1 (the launch plans the documents
    on the host, so a CUDA cu_seqlens is copied back, a synchronisation: pass a CPU one). Returns o [B, T, HV, 128]
    bf16, or (o, final states fp32 [N, HV, 128, 128]) with ``output_final_state=True``.
    """
    batch, tokens, heads, value_heads = _check_gdn_qkv(q, k, v)
    for t, name in ((a, "a"), (b, "b")):
        _check(t, name, torch.bfloat16, 3)
    for t, name in ((A_log, "A_log"), (dt_bias, "dt_bias")):
        _check(t, name, torch.float32, 1)
    if a.shape != (batch, tokens, value_heads) or b.shape != a.shape:
        raise ValueError(f"dflash_tune: a and b must be [B, T, HV] = {(batch, tokens, value_heads)}, got "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    if A_log.shape != (value_heads,) or dt_bias.shape != (value_heads,):
        raise ValueError(f"dflash_tune: A_log and dt_bias must be [HV] = [{value_heads}]")
    _check_cu_seqlens(cu_seqlens, batch, tokens)
    _check_states(initial_state, batch if cu_seqlens is None else cu_seqlens.numel() - 1, value_heads)
    _check_devices(q=q, k=k, v=v, a=a, b=b, A_log=A_log, dt_bias=dt_bias, initial_state=initial_state)
    _no_grad_needed("gated_delta_rule", q, k, v, a, b, A_log, dt_bias,
                    *([] if initial_state is None else [initial_state]))
    o, final_state = _call(_ops.gated_delta_rule, q, k, v, a, b, A_log, dt_bias, None, None, initial_state,
                           cu_seqlens, float(scale or 0.0), True, output_final_state, tune_missing)
    return (o, final_state) if output_final_state else o


def chunk_gated_delta_rule(q, k, v, g, beta, scale: Optional[float] = None, initial_state=None,
                           output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                           use_beta_sigmoid_in_kernel: bool = False, allow_neg_eigval: bool = False,
                           state_v_first: bool = False, cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None,
                           cp_context=None, *, tune_missing: bool = False, **kwargs):
    """flash-linear-attention 0.6's ``fla.ops.gated_delta_rule.chunk_gated_delta_rule``, same arguments and
    results, on the gdn family's tuned kernels; forward only (a call that needs gradients raises).

    q, k [B, T, H, 128], v [B, T, HV, 128] bf16 (HV a multiple of H), g (log-space decay) and beta [B, T, HV]
    (any float dtype; with ``use_beta_sigmoid_in_kernel`` beta is the logits, times 2 with ``allow_neg_eigval``;
    with ``use_gate_in_kernel=True`` g is the raw gate input and ``A_log`` [HV] (and ``dt_bias`` [HV]) make the
    decay -exp(A_log) softplus(g + dt_bias)), ``initial_state`` [N, HV, K, V] float ([N, HV, V, K] with
    ``state_v_first``), cu_seqlens [N + 1] at batch 1 (a CUDA one is copied to the host: pass ``cu_seqlens_cpu``
    to avoid the synchronisation). Returns (o [B, T, HV, 128] bf16, final states fp32 [N, HV, K, V] or None).
    ``chunk_size`` and ``chunk_indices`` are accepted and not needed (the tuned winner picks its chunk length);
    ``cp_context`` (context parallel) is not served.
    """
    if "transpose_state_layout" in kwargs:
        if state_v_first:
            raise ValueError("dflash_tune: pass state_v_first or the deprecated transpose_state_layout, not both")
        state_v_first = kwargs.pop("transpose_state_layout")
    if "head_first" in kwargs:
        raise ValueError("dflash_tune: head_first is not served (flash-linear-attention removed it too): "
                         "pass [B, T, H, ...] tensors")
    use_gate_in_kernel = kwargs.pop("use_gate_in_kernel", False)
    A_log, dt_bias = kwargs.pop("A_log", None), kwargs.pop("dt_bias", None)
    chunk_size = kwargs.pop("chunk_size", 64)
    if kwargs:
        raise TypeError(f"dflash_tune.chunk_gated_delta_rule: unexpected keyword arguments {sorted(kwargs)}")
    if chunk_size not in (16, 32, 64):
        raise ValueError(f"dflash_tune: chunk_size must be 16, 32 or 64, got {chunk_size}")
    if cp_context is not None:
        raise NotImplementedError("dflash_tune.chunk_gated_delta_rule: cp_context (context parallel) is not served")
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
        raise ValueError("dflash_tune: allow_neg_eigval=True requires use_beta_sigmoid_in_kernel=True")
    batch, tokens, heads, value_heads = _check_gdn_qkv(q, k, v)
    for t, name in ((g, "g"), (beta, "beta")):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise TypeError(f"dflash_tune: {name} must be a float tensor [B, T, HV]")
        if t.shape != (batch, tokens, value_heads):
            raise ValueError(f"dflash_tune: {name} must be [B, T, HV] = {(batch, tokens, value_heads)}, got "
                             f"{tuple(t.shape)}")
    if use_gate_in_kernel:
        if A_log is None:
            raise ValueError("dflash_tune: use_gate_in_kernel=True needs A_log")
        for t, name in ((A_log, "A_log"), (dt_bias, "dt_bias")):
            if t is not None and (not isinstance(t, torch.Tensor) or t.shape != (value_heads,)):
                raise ValueError(f"dflash_tune: {name} must be a tensor [HV] = [{value_heads}]")
    _check_cu_seqlens(cu_seqlens, batch, tokens)
    if cu_seqlens_cpu is not None:
        _check_cu_seqlens(cu_seqlens_cpu, batch, tokens)
        cu_seqlens = cu_seqlens_cpu  # the host copy the launch plans from: no synchronisation
    num_seqs = batch if cu_seqlens is None else cu_seqlens.numel() - 1
    if state_v_first and initial_state is not None:
        initial_state = initial_state.transpose(-1, -2)
    _check_states(initial_state, num_seqs, value_heads)
    _check_devices(q=q, k=k, v=v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias, initial_state=initial_state)
    _no_grad_needed("chunk_gated_delta_rule", q, k, v, g, beta,
                    *[t for t in (initial_state, A_log, dt_bias) if t is not None])
    raw_gates = (use_gate_in_kernel and use_beta_sigmoid_in_kernel and not allow_neg_eigval and
                 g.dtype == torch.bfloat16 and beta.dtype == torch.bfloat16)
    if raw_gates:  # the kernels' own gate math, as the Qwen3.5 form
        gates = (g, beta, A_log.float().contiguous(),
                 torch.zeros_like(A_log, dtype=torch.float32) if dt_bias is None else dt_bias.float().contiguous(),
                 None, None)
    else:  # fp32 g and beta as given (or from their raw forms here, in fp32)
        g32 = g.float()
        if use_gate_in_kernel:
            g32 = -A_log.float().exp() * torch.nn.functional.softplus(g32 + (0.0 if dt_bias is None else
                                                                              dt_bias.float()))
        beta32 = beta.float()
        if use_beta_sigmoid_in_kernel:
            beta32 = beta32.sigmoid() * (2.0 if allow_neg_eigval else 1.0)
        gates = (None, None, None, None, g32, beta32)
    o, final_state = _call(_ops.gated_delta_rule, q, k, v, *gates, initial_state, cu_seqlens,
                           float(scale or 0.0), use_qk_l2norm_in_kernel, output_final_state, tune_missing)
    if not output_final_state:
        return o, None
    return o, (final_state.transpose(-1, -2).contiguous() if state_v_first else final_state)


def _check_cu_seqlens(cu_seqlens, batch: int, tokens: int):
    if cu_seqlens is None:
        return
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dtype not in (torch.int32, torch.int64) or \
            cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError("dflash_tune: cu_seqlens must be an int32/int64 tensor [docs + 1] (0 ... T)")
    if batch != 1:
        raise ValueError(f"dflash_tune: cu_seqlens (packed sequences) needs batch 1, got {batch}")


def causal_conv1d(x, weight, bias=None, activation="silu", cu_seqlens=None, *, tune_missing: bool = False):
    """``causal_conv1d_fn(x, weight, bias, activation="silu")``: y[b, c, t] = silu(sum_i weight[c, i] *
    x[b, c, t - 3 + i]) (zeros before each sequence, or each document of cu_seqlens [docs + 1] int at batch 1).

    x [B, C, T] bf16 (token-major memory, as transformers passes it, is read without a copy), weight [C, 4] bf16.
    The conv1d family fuses the SiLU and has no bias: activation must be "silu" (or True) and bias None. Returns
    y [B, C, T] bf16 in token-major memory. Forward only.
    """
    if activation not in ("silu", "swish", True):
        raise ValueError(f"dflash_tune: the conv1d family fuses SiLU; activation must be 'silu', got {activation!r}")
    if bias is not None:
        raise ValueError("dflash_tune: the conv1d family has no bias (Qwen3.5's conv has none); pass bias=None")
    _check(x, "x", torch.bfloat16, 3)
    _check(weight, "weight", torch.bfloat16, 2)
    if weight.shape != (x.shape[1], 4):
        raise ValueError(f"dflash_tune: weight must be [C, 4] = {(x.shape[1], 4)}, got {tuple(weight.shape)}")
    _check_cu_seqlens(cu_seqlens, x.shape[0], x.shape[2])
    _check_devices(x=x, weight=weight)
    _no_grad_needed("causal_conv1d", x, weight)
    return _call(_ops.causal_conv1d_silu, x, weight, cu_seqlens, tune_missing)
