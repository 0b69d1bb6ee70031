// The CUDA implementations of the dflash_tune tensor operators (schemas and shapes in op_schemas.cc): each batch
// row is one launch of the trainer's CachedKernelOps (the tuned winners from the cache), on torch's current stream.
#include <torch/library.h>
#include <torch/torch.h>

#include <optional>
#include <tuple>
#include <vector>

#include "runtime.h"

namespace dflash::python {
namespace {

using torch::Tensor;

// Row `b` of the optional per-row tensor, or undefined.
Tensor RowOf(const std::optional<Tensor>& t, std::int64_t b) { return t && t->defined() ? (*t)[b] : Tensor(); }

// The rows stacked into [B, ...] (a view of the only row for B == 1).
Tensor Batched(std::vector<Tensor> rows) {
  return rows.size() == 1 ? rows[0].unsqueeze(0) : torch::stack(rows);
}

void CheckBatch(const char* op, const Tensor& t, const char* name, std::int64_t dims) {
  TORCH_CHECK(t.dim() == dims, "dflash_tune.", op, ": ", name, " must have ", dims, " dims, got ", t.sizes());
}

trainer::DraftMask MaskOf(const Tensor& anchors, const Tensor& block_valid, const std::optional<Tensor>& doc_start,
                          std::int64_t b, std::int64_t ctx_len, std::int64_t block_size, std::int64_t window) {
  trainer::DraftMask mask;
  mask.anchors = anchors[b];
  mask.valid = block_valid[b];
  mask.doc_start = RowOf(doc_start, b);
  mask.context_len = ctx_len;
  mask.block_size = static_cast<int>(block_size);
  mask.window = window;
  return mask;
}

void CheckAttention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& anchors,
                    const Tensor& block_valid) {
  CheckBatch("attention", q, "q", 4);
  CheckBatch("attention", k, "k", 4);
  CheckBatch("attention", v, "v", 4);
  TORCH_CHECK(anchors.dim() == 2 && anchors.size(0) == q.size(0) && block_valid.sizes() == anchors.sizes(),
              "dflash_tune.attention: anchors and block_valid must be [B, N] with B = ", q.size(0), ", got ",
              anchors.sizes(), " and ", block_valid.sizes());
  TORCH_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0), "dflash_tune.attention: q, k, v batch sizes differ");
}

std::tuple<Tensor, Tensor> AttentionFwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& anchors,
                                        const Tensor& block_valid, const std::optional<Tensor>& doc_start,
                                        std::int64_t ctx_len, std::int64_t block_size, std::int64_t window,
                                        double scale, bool tune_missing) {
  CheckAttention(q, k, v, anchors, block_valid);
  auto ops = OpsFor(q.device(), tune_missing);
  std::vector<Tensor> o, lse;
  for (std::int64_t b = 0; b < q.size(0); ++b) {
    auto [o_b, lse_b] = ops->DraftAttentionForward(
        q[b], k[b], v[b], MaskOf(anchors, block_valid, doc_start, b, ctx_len, block_size, window), scale);
    o.push_back(o_b);
    lse.push_back(lse_b.squeeze(0));
  }
  return {Batched(std::move(o)), Batched(std::move(lse))};
}

std::tuple<Tensor, Tensor, Tensor> AttentionBwd(const Tensor& dout, const Tensor& q, const Tensor& k,
                                                const Tensor& v, const Tensor& o, const Tensor& lse,
                                                const Tensor& anchors, const Tensor& block_valid,
                                                const std::optional<Tensor>& doc_start, std::int64_t ctx_len,
                                                std::int64_t block_size, std::int64_t window, double scale,
                                                bool tune_missing) {
  CheckAttention(q, k, v, anchors, block_valid);
  TORCH_CHECK(dout.sizes() == q.sizes() && o.sizes() == q.sizes() && lse.dim() == 3 && lse.size(0) == q.size(0),
              "dflash_tune.attention backward: dout and o must be shaped like q, lse [B, Hq, rows]");
  auto ops = OpsFor(q.device(), tune_missing);
  std::vector<Tensor> dq, dk, dv;
  for (std::int64_t b = 0; b < q.size(0); ++b) {
    auto [dq_b, dk_b, dv_b] =
        ops->DraftAttentionBackward(dout[b], q[b], k[b], v[b], o[b], lse[b].unsqueeze(0),
                                    MaskOf(anchors, block_valid, doc_start, b, ctx_len, block_size, window), scale);
    dq.push_back(dq_b);
    dk.push_back(dk_b);
    dv.push_back(dv_b);
  }
  return {Batched(std::move(dq)), Batched(std::move(dk)), Batched(std::move(dv))};
}

Tensor CausalConv1dSilu(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& cu_seqlens,
                        bool tune_missing) {
  CheckBatch("causal_conv1d", x, "x", 3);
  const bool packed = cu_seqlens && cu_seqlens->defined();
  TORCH_CHECK(!packed || x.size(0) == 1, "dflash_tune.causal_conv1d: cu_seqlens needs batch 1, got ", x.size(0));
  auto ops = OpsFor(x.device(), tune_missing);
  std::vector<Tensor> y;
  for (std::int64_t b = 0; b < x.size(0); ++b) {
    y.push_back(ops->CausalConv1dSilu(x[b].transpose(0, 1), weight, packed ? *cu_seqlens : Tensor()));
  }
  return Batched(std::move(y)).transpose(1, 2);  // [B, T, C] memory as [B, C, T]
}

std::tuple<Tensor, Tensor> GatedDeltaRule(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const std::optional<Tensor>& a, const std::optional<Tensor>& b,
                                          const std::optional<Tensor>& A_log, const std::optional<Tensor>& dt_bias,
                                          const std::optional<Tensor>& g, const std::optional<Tensor>& beta,
                                          const std::optional<Tensor>& initial_state,
                                          const std::optional<Tensor>& cu_seqlens, double scale, bool qk_l2norm,
                                          bool output_final_state, bool tune_missing) {
  for (auto [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) CheckBatch("gated_delta_rule", *t, name, 4);
  const std::int64_t batch = q.size(0);
  for (auto [t, name] : {std::pair{&a, "a"}, {&b, "b"}, {&g, "g"}, {&beta, "beta"}}) {
    if (*t) {
      CheckBatch("gated_delta_rule", **t, name, 3);
      TORCH_CHECK((*t)->size(0) == batch, "dflash_tune.gated_delta_rule: ", name, "'s batch size differs from q's");
    }
  }
  const bool packed = cu_seqlens && cu_seqlens->defined();
  TORCH_CHECK(!packed || batch == 1, "dflash_tune.gated_delta_rule: cu_seqlens needs batch 1, got ", batch);
  TORCH_CHECK(k.size(0) == batch && v.size(0) == batch, "dflash_tune.gated_delta_rule: q, k, v batch sizes differ");
  const bool has_h0 = initial_state && initial_state->defined();
  TORCH_CHECK(!has_h0 || packed || initial_state->size(0) == batch,
              "dflash_tune.gated_delta_rule: initial_state must hold one state per batch row (", batch, "), got ",
              initial_state->sizes());
  auto ops = OpsFor(q.device(), tune_missing);
  const auto whole = [](const std::optional<Tensor>& t) { return t ? *t : Tensor(); };
  std::vector<Tensor> o, ht;
  for (std::int64_t r = 0; r < batch; ++r) {
    const trainer::CachedKernelOps::GdnGates gates{RowOf(a, r), RowOf(b, r), whole(A_log), whole(dt_bias),
                                                   RowOf(g, r), RowOf(beta, r)};
    trainer::CachedKernelOps::GdnForm form;
    form.qk_l2norm = qk_l2norm;
    form.scale = scale;
    form.final_state = output_final_state;
    if (has_h0) form.initial_state = packed ? *initial_state : initial_state->narrow(0, r, 1);
    auto [o_r, ht_r] = ops->GatedDeltaRuleWith(q[r], k[r], v[r], gates, packed ? *cu_seqlens : Tensor(), form);
    o.push_back(o_r);
    if (output_final_state) ht.push_back(ht_r);
  }
  return {Batched(std::move(o)),
          output_final_state ? torch::cat(ht) : torch::empty({0}, q.options().dtype(torch::kFloat))};
}

}  // namespace

TORCH_LIBRARY_IMPL(dflash_tune, CUDA, m) {
  m.impl("attention_fwd", &AttentionFwd);
  m.impl("attention_bwd", &AttentionBwd);
  m.impl("causal_conv1d_silu", &CausalConv1dSilu);
  m.impl("gated_delta_rule", &GatedDeltaRule);
}

}  // namespace dflash::python
