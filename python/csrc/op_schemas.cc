// The schemas of the dflash_tune tensor operators (TORCH_LIBRARY; the cache queries, which take no tensors, are
// defined with their implementations in cache_ops.cc). The CUDA
// implementations are in cuda_ops.cc, the shape-only (Meta / fake tensor) ones torch.compile traces with in
// meta_ops.cc, the cache queries (no tensors) in cache_ops.cc; autograd for the attention is registered in Python
// (dflash_tune/ops.py: attention_bwd is the backward of attention_fwd). Shapes (B batch rows, launched one at a time):
//   attention_fwd: q [B, N*bs, Hq, D], k, v [B, ctx_len + N*bs, Hkv, D] bf16, anchors [B, N] int, block_valid [B, N]
//                  bool/uint8, doc_start [B, N] int or None -> (o [B, N*bs, Hq, D] bf16, lse [B, Hq, N*bs] fp32)
//   attention_bwd: dout like q, the forward's inputs and outputs -> (dq, dk, dv) shaped like q, k, v
//   causal_conv1d_silu: x [B, C, T] bf16 (token-major memory avoids a copy), weight [C, 4] bf16, cu_seqlens [docs+1]
//                  int (B == 1) or None -> y [B, C, T] in token-major memory (strides C*T, 1, C)
//   gated_delta_rule: q, k [B, T, H, 128], v [B, T, HV, 128] bf16; the gates raw (a, b [B, T, HV] bf16, A_log,
//                  dt_bias [HV] fp32; g, beta None) or precomputed (g = log decay, beta [B, T, HV] float; a, b, A_log,
//                  dt_bias None); initial_state [N, HV, 128, 128] float or None; cu_seqlens [N+1] int (B == 1) or
//                  None (then N = B); scale (0: 128**-0.5); qk_l2norm: q, k normalised in the kernels
//                  -> (o [B, T, HV, 128] bf16, final states fp32 [N, HV, 128, 128] if output_final_state else [0])
// tune_missing: a missing key is tuned in place (single flight with other processes) instead of raising.
#include <torch/library.h>

TORCH_LIBRARY(dflash_tune, m) {
  m.def("attention_fwd(Tensor q, Tensor k, Tensor v, Tensor anchors, Tensor block_valid, Tensor? doc_start, "
        "int ctx_len, int block_size, int window, float scale, bool tune_missing) -> (Tensor, Tensor)");
  m.def("attention_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor anchors, "
        "Tensor block_valid, Tensor? doc_start, int ctx_len, int block_size, int window, float scale, "
        "bool tune_missing) -> (Tensor, Tensor, Tensor)");
  m.def("causal_conv1d_silu(Tensor x, Tensor weight, Tensor? cu_seqlens, bool tune_missing) -> Tensor");
  m.def("gated_delta_rule(Tensor q, Tensor k, Tensor v, Tensor? a, Tensor? b, Tensor? A_log, Tensor? dt_bias, "
        "Tensor? g, Tensor? beta, Tensor? initial_state, Tensor? cu_seqlens, float scale, bool qk_l2norm, "
        "bool output_final_state, bool tune_missing) -> (Tensor, Tensor)");
}
