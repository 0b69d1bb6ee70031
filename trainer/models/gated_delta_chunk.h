// The gated delta rule of the Qwen3.5 layer (spec dflash-training.md §1) continuing from a carried fp32 state, in the
// chunked (WY) form, for decoding (target_decoder.h). Per value head, with decay d_t = exp(g_t):
//   S <- d_t S;  u_t = beta_t (v_t - S^T k_t);  S <- S + k_t u_t^T;  o_t = S^T q_t
// Unrolled over a chunk with G_t = sum_{s<=t} g_s and D_ts = exp(G_t - G_s) (s <= t):
//   u_t + beta_t sum_{s<t} D_ts (k_t . k_s) u_s = beta_t (v_t - exp(G_t) S0^T k_t)     (one unit-lower solve)
//   o_t = exp(G_t) S0^T q_t + sum_{s<=t} D_ts (q_t . k_s) u_s
//   S_n = exp(G_n) S0 + sum_{s<=n} exp(G_n - G_s) k_s u_s^T
// The last line gives the state after ANY prefix of the call from its trace, which is how speculative decoding rolls
// back to the accepted tokens without re-running the target. Chunks of at most 64 tokens keep the solve accurate.
// Who may call: trainer/models (the decoder) and tests. Thread-safety: pure functions.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace dflash::trainer {

// What one call leaves for rolling back: per chunk its start state and prepared per-token values.
struct GatedDeltaTrace {
  struct Chunk {
    std::int64_t start = 0;     // token index of the chunk's first token within the call
    torch::Tensor state0;       // fp32 [B, HV, K, V], the state before the chunk
    torch::Tensor k;            // fp32 [B, HV, c, K], L2-normalised keys
    torch::Tensor u;            // fp32 [B, HV, c, V]
    torch::Tensor log_decay;    // fp32 [B, HV, c], G (cumulative g inside the chunk)
  };
  std::vector<Chunk> chunks;
  std::int64_t tokens = 0;
};

struct GatedDeltaResult {
  torch::Tensor o;      // fp32 [B, T, HV, V]
  torch::Tensor state;  // fp32 [B, HV, K, V] after the last token
  GatedDeltaTrace trace;
};

// q, k [B, T, H, K] and v [B, T, HV, V] (after the conv; HV a multiple of H, value head j uses key head j / (HV / H)),
// a, b [B, T, HV] raw gate inputs, A_log and dt_bias [HV]; state0 fp32 [B, HV, K, V] or undefined (zeros).
// Same conventions as Ops::GatedDeltaRule (L2 norm eps 1e-6, q scaled by K^-1/2, g = -exp(A_log) softplus(a + dt_bias),
// beta = sigmoid(b)). T >= 1. The trace is filled only when keep_trace.
GatedDeltaResult GatedDeltaChunked(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& A_log,
                                   const torch::Tensor& dt_bias, const torch::Tensor& state0, bool keep_trace,
                                   std::int64_t chunk_size = 64);

// The state after the first n tokens (0 <= n <= trace.tokens) of the call that produced `trace`.
torch::Tensor GatedDeltaStateAfter(const GatedDeltaTrace& trace, std::int64_t n);

}  // namespace dflash::trainer
