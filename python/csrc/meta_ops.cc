// The Meta (fake tensor) implementations of the dflash_tune tensor operators: output shapes, dtypes and strides
// exactly as cuda_ops.cc produces them, so torch.compile traces the operators without running them.
#include <torch/library.h>
#include <torch/torch.h>

#include <optional>
#include <tuple>

namespace dflash::python {
namespace {

using torch::Tensor;

std::tuple<Tensor, Tensor> AttentionFwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& anchors,
                                        const Tensor& block_valid, const std::optional<Tensor>& doc_start,
                                        std::int64_t ctx_len, std::int64_t block_size, std::int64_t window,
                                        double scale, bool tune_missing) {
  TORCH_CHECK(q.dim() == 4, "dflash_tune.attention: q must be [B, rows, Hq, D], got ", q.sizes());
  return {torch::empty(q.sizes(), q.options()),
          torch::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(torch::kFloat))};
}

std::tuple<Tensor, Tensor, Tensor> AttentionBwd(const Tensor& dout, const Tensor& q, const Tensor& k,
                                                const Tensor& v, const Tensor& o, const Tensor& lse,
                                                const Tensor& anchors, const Tensor& block_valid,
                                                const std::optional<Tensor>& doc_start, std::int64_t ctx_len,
                                                std::int64_t block_size, std::int64_t window, double scale,
                                                bool tune_missing) {
  return {torch::empty(q.sizes(), q.options()), torch::empty(k.sizes(), k.options()),
          torch::empty(v.sizes(), v.options())};
}

Tensor CausalConv1dSilu(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& cu_seqlens,
                        bool tune_missing) {
  TORCH_CHECK(x.dim() == 3, "dflash_tune.causal_conv1d: x must be [B, C, T], got ", x.sizes());
  return torch::empty({x.size(0), x.size(2), x.size(1)}, x.options()).transpose(1, 2);
}

std::tuple<Tensor, Tensor> GatedDeltaRule(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const std::optional<Tensor>& a, const std::optional<Tensor>& b,
                                          const std::optional<Tensor>& A_log, const std::optional<Tensor>& dt_bias,
                                          const std::optional<Tensor>& g, const std::optional<Tensor>& beta,
                                          const std::optional<Tensor>& initial_state,
                                          const std::optional<Tensor>& cu_seqlens, double scale, bool qk_l2norm,
                                          bool output_final_state, bool tune_missing) {
  TORCH_CHECK(v.dim() == 4, "dflash_tune.gated_delta_rule: v must be [B, T, HV, 128], got ", v.sizes());
  const std::int64_t seqs = cu_seqlens && cu_seqlens->defined() ? cu_seqlens->size(0) - 1 : v.size(0);
  const auto states = v.options().dtype(torch::kFloat);
  return {torch::empty(v.sizes(), v.options()), output_final_state
                                                    ? torch::empty({seqs, v.size(2), v.size(3), v.size(3)}, states)
                                                    : torch::empty({0}, states)};
}

}  // namespace

TORCH_LIBRARY_IMPL(dflash_tune, Meta, m) {
  m.impl("attention_fwd", &AttentionFwd);
  m.impl("attention_bwd", &AttentionBwd);
  m.impl("causal_conv1d_silu", &CausalConv1dSilu);
  m.impl("gated_delta_rule", &GatedDeltaRule);
}

}  // namespace dflash::python
