#include "trainer/models/gated_delta_chunk.h"

#include <cmath>
#include <limits>

namespace dflash::trainer {
namespace {

torch::Tensor L2Normalise(const torch::Tensor& x) {
  return x * torch::rsqrt(x.pow(2).sum(-1, /*keepdim=*/true) + 1e-6);
}

// exp(G_n - G_s) * k_s summed against u_s over s < n, plus exp(G_n) * S0: the state after n tokens of one chunk
// (0 <= n <= c; n == 0 is S0).
torch::Tensor ChunkStateAfter(const GatedDeltaTrace::Chunk& c, std::int64_t n) {
  if (n == 0) return c.state0;
  const auto g = c.log_decay.narrow(-1, 0, n);                  // [B, HV, n]
  const auto g_last = g.narrow(-1, n - 1, 1);                   // [B, HV, 1]
  const auto k = c.k.narrow(2, 0, n) * torch::exp(g_last - g).unsqueeze(-1);
  return torch::exp(g_last).unsqueeze(-1) * c.state0 + torch::matmul(k.transpose(-1, -2), c.u.narrow(2, 0, n));
}

// One token from state S (updated to the next state): with d = exp(g), u = beta (v - d S^T k),
// S' = d S + k u^T and o = S'^T q = d S^T q + (k . q) u. Reads S once for both projections and updates the fresh
// d S in place (nothing else holds it). Shapes as in the chunk loop with c = 1.
torch::Tensor OneToken(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const torch::Tensor& beta, const torch::Tensor& g, torch::Tensor& state, torch::Tensor& u) {
  const auto proj = torch::matmul(torch::cat({k, q}, 2), state);  // [B, HV, 2, V]: S^T k, S^T q
  const auto d = torch::exp(g).unsqueeze(-1);                      // [B, HV, 1, 1]
  u = beta.unsqueeze(-1) * (v - d * proj.narrow(2, 0, 1));         // [B, HV, 1, V]
  const auto o = d * proj.narrow(2, 1, 1) + (k * q).sum(-1, /*keepdim=*/true) * u;
  auto next = state * d;
  next.addcmul_(k.transpose(-1, -2), u);  // + k u^T, one elementwise pass (a rank-1 GEMM would pack the state)
  state = next;
  return o;
}

}  // namespace

GatedDeltaResult GatedDeltaChunked(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& A_log,
                                   const torch::Tensor& dt_bias, const torch::Tensor& state0, bool keep_trace,
                                   std::int64_t chunk_size) {
  TORCH_CHECK(q.dim() == 4 && q.sizes() == k.sizes(), "GatedDeltaChunked: q and k must be [B, T, H, K], got ",
              q.sizes(), " and ", k.sizes());
  const std::int64_t batch = q.size(0), tokens = q.size(1), h = q.size(2), kdim = q.size(3);
  TORCH_CHECK(v.dim() == 4 && v.size(0) == batch && v.size(1) == tokens, "GatedDeltaChunked: v must be [B, T, HV, V], got ",
              v.sizes());
  const std::int64_t hv = v.size(2), vdim = v.size(3);
  TORCH_CHECK(tokens >= 1 && chunk_size >= 1, "GatedDeltaChunked: needs at least one token and a positive chunk size");
  TORCH_CHECK(hv % h == 0, "GatedDeltaChunked: value heads ", hv, " not a multiple of key heads ", h);
  TORCH_CHECK(a.sizes() == torch::IntArrayRef({batch, tokens, hv}) && b.sizes() == a.sizes(),
              "GatedDeltaChunked: a and b must be [B, T, HV], got ", a.sizes(), " and ", b.sizes());
  TORCH_CHECK(A_log.numel() == hv && dt_bias.numel() == hv, "GatedDeltaChunked: A_log and dt_bias must be [HV]");
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(v.device());
  torch::Tensor state = state0.defined() ? state0.to(torch::kFloat) : torch::zeros({batch, hv, kdim, vdim}, f32);
  TORCH_CHECK(state.sizes() == torch::IntArrayRef({batch, hv, kdim, vdim}), "GatedDeltaChunked: state must be [",
              batch, ", ", hv, ", ", kdim, ", ", vdim, "], got ", state.sizes());

  // [B, HV, T, *] in fp32; value head j uses key head j / group.
  const std::int64_t group = hv / h;
  const auto heads_first = [](const torch::Tensor& x) { return x.to(torch::kFloat).permute({0, 2, 1, 3}); };
  const auto qn = heads_first(L2Normalise(q.to(torch::kFloat)) * (1.0 / std::sqrt(double(kdim))))
                      .repeat_interleave(group, 1);
  const auto kn = heads_first(L2Normalise(k.to(torch::kFloat))).repeat_interleave(group, 1);
  const auto v32 = heads_first(v);
  const auto g = (-torch::exp(A_log.to(torch::kFloat)) * torch::softplus(a.to(torch::kFloat) + dt_bias.to(torch::kFloat)))
                     .permute({0, 2, 1});                                                 // [B, HV, T]
  const auto beta = torch::sigmoid(b.to(torch::kFloat)).permute({0, 2, 1});              // [B, HV, T]

  GatedDeltaResult result;
  result.trace.tokens = tokens;
  std::vector<torch::Tensor> outs;
  const auto neg_inf = torch::full({}, -std::numeric_limits<float>::infinity(), f32);
  for (std::int64_t start = 0; start < tokens; start += chunk_size) {
    const std::int64_t c = std::min(chunk_size, tokens - start);
    const auto qc = qn.narrow(2, start, c), kc = kn.narrow(2, start, c), vc = v32.narrow(2, start, c);
    const auto bc = beta.narrow(2, start, c);
    const auto gc = torch::cumsum(g.narrow(2, start, c), -1);                              // G [B, HV, c]
    if (c == 1) {  // one token (decoding): the same algebra with two passes over the state fewer
      GatedDeltaTrace::Chunk chunk{start, state, kc, {}, gc};
      outs.push_back(OneToken(qc, kc, vc, bc, gc, state, chunk.u));
      if (keep_trace) result.trace.chunks.push_back(std::move(chunk));
      continue;
    }
    const auto diff = gc.unsqueeze(-1) - gc.unsqueeze(-2);                                 // G_t - G_s
    const auto ones = torch::ones({c, c}, f32.dtype(torch::kBool));
    const auto decay_incl = torch::exp(torch::where(torch::tril(ones), diff, neg_inf));    // s <= t
    const auto decay_strict = torch::exp(torch::where(torch::tril(ones, -1), diff, neg_inf));  // s < t
    const auto gamma = torch::exp(gc).unsqueeze(-1);                                       // [B, HV, c, 1]
    const auto system = torch::eye(c, f32) + bc.unsqueeze(-1) * torch::matmul(kc, kc.transpose(-1, -2)) * decay_strict;
    const auto rhs = bc.unsqueeze(-1) * (vc - gamma * torch::matmul(kc, state));
    const auto u = torch::linalg_solve_triangular(system, rhs, /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
    outs.push_back(gamma * torch::matmul(qc, state) +
                   torch::matmul(torch::matmul(qc, kc.transpose(-1, -2)) * decay_incl, u));
    GatedDeltaTrace::Chunk chunk{start, state, kc, u, gc};
    state = ChunkStateAfter(chunk, c);
    if (keep_trace) result.trace.chunks.push_back(std::move(chunk));
  }
  result.o = torch::cat(outs, 2).permute({0, 2, 1, 3});  // [B, T, HV, V]
  result.state = state;
  return result;
}

torch::Tensor GatedDeltaStateAfter(const GatedDeltaTrace& trace, std::int64_t n) {
  TORCH_CHECK(!trace.chunks.empty(), "GatedDeltaStateAfter: the call kept no trace");
  TORCH_CHECK(n >= 0 && n <= trace.tokens, "GatedDeltaStateAfter: ", n, " tokens asked of a call of ", trace.tokens);
  // The chunk holding token n - 1 (n == 0: the first chunk's start state).
  std::size_t i = 0;
  while (i + 1 < trace.chunks.size() && trace.chunks[i + 1].start < n) ++i;
  return ChunkStateAfter(trace.chunks[i], n - trace.chunks[i].start);
}

}  // namespace dflash::trainer
