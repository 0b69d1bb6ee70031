#include "trainer/ops/reference_ops.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace dflash::trainer {
namespace {

using torch::indexing::None;
using torch::indexing::Slice;

// Document index of every token [T] (int64, on `device`) from cu_seqlens (int32 [docs + 1] on the CPU, 0 ... T;
// undefined = one document).
torch::Tensor DocumentOfToken(const torch::Tensor& cu_seqlens, std::int64_t tokens, const torch::Device& device) {
  const auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  if (!cu_seqlens.defined()) return torch::zeros({tokens}, opts);
  TORCH_CHECK(cu_seqlens.dim() == 1 && cu_seqlens.size(0) >= 2, "cu_seqlens must be [docs + 1] with docs >= 1, got ",
              cu_seqlens.sizes());
  const auto cu = cu_seqlens.to(torch::kCPU, torch::kLong);
  const auto lengths = cu.index({Slice(1, None)}) - cu.index({Slice(None, -1)});
  TORCH_CHECK(cu[0].item<std::int64_t>() == 0 && cu[-1].item<std::int64_t>() == tokens,
              "cu_seqlens must run from 0 to the token count ", tokens, ", got ", cu[0].item<std::int64_t>(), " ... ",
              cu[-1].item<std::int64_t>());
  TORCH_CHECK((lengths >= 0).all().item<bool>(), "cu_seqlens must be non-decreasing");
  return torch::repeat_interleave(torch::arange(lengths.size(0), torch::kLong), lengths).to(device);
}

// softmax(scale q k^T masked) v in fp32 with GQA by repeat_interleave; q [Q, Hq, D], k and v [KV, Hkv, D],
// mask bool [Q, KV]. Rows with no visible kv give 0 (and zero gradients): their scores are replaced by a constant
// before the softmax and their probabilities multiplied by the (all-false) mask.
torch::Tensor MaskedAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& mask, double scale) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "attention: q, k, v must be [rows, heads, dim]");
  TORCH_CHECK(k.sizes() == v.sizes(), "attention: k ", k.sizes(), " and v ", v.sizes(), " differ");
  TORCH_CHECK(q.size(2) == k.size(2), "attention: head dims of q and k differ");
  const auto hq = q.size(1), hkv = k.size(1);
  TORCH_CHECK(hkv > 0 && hq % hkv == 0, "attention: query heads ", hq, " not a multiple of KV heads ", hkv);
  TORCH_CHECK(mask.sizes() == torch::IntArrayRef({q.size(0), k.size(0)}), "attention: mask ", mask.sizes(),
              " does not match q rows ", q.size(0), " x kv rows ", k.size(0));
  const auto group = hq / hkv;
  const auto q32 = q.to(torch::kFloat).transpose(0, 1);                                         // [Hq, Q, D]
  const auto k32 = k.to(torch::kFloat).repeat_interleave(group, 1).transpose(0, 1);             // [Hq, KV, D]
  const auto v32 = v.to(torch::kFloat).repeat_interleave(group, 1).transpose(0, 1);             // [Hq, KV, D]
  const auto scores = torch::matmul(q32, k32.transpose(1, 2)) * scale;                          // [Hq, Q, KV]
  const auto visible = mask.unsqueeze(0);
  const auto any_visible = mask.any(-1, /*keepdim=*/true).unsqueeze(0);                         // [1, Q, 1]
  const auto neg_inf = torch::full({}, -std::numeric_limits<float>::infinity(), scores.options());
  const auto masked = torch::where(any_visible, torch::where(visible, scores, neg_inf), torch::zeros_like(scores));
  const auto probs = torch::softmax(masked, -1) * visible.to(torch::kFloat);
  return torch::matmul(probs, v32).transpose(0, 1).to(q.scalar_type());                         // [Q, Hq, D]
}

class ReferenceOps final : public Ops {
 public:
  std::string name() const override { return "reference"; }

  torch::Tensor DraftAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const DraftMask& mask, double scale) override {
    TORCH_CHECK(q.dim() == 3, "DraftAttention: q must be [N*B, Hq, D], got ", q.sizes());
    const auto dense = DraftMaskDense(mask, q.size(0)).to(q.device());
    return MaskedAttention(q, k, v, dense, scale);
  }

  torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& cu_seqlens, double scale) override {
    TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && q.size(0) == k.size(0),
                "CausalAttention: q [T, Hq, D] and k [T, Hkv, D] must have the same T, got ", q.sizes(), " and ",
                k.sizes());
    return MaskedAttention(q, k, v, CausalMaskDense(cu_seqlens, q.size(0), q.device()), scale);
  }

  torch::Tensor CausalConv1dSilu(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& cu_seqlens) override {
    TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && weight.size(0) == x.size(1),
                "CausalConv1dSilu: x must be [T, C] and weight [C, W], got ", x.sizes(), " and ", weight.sizes());
    const auto tokens = x.size(0), width = weight.size(1);
    const auto doc = DocumentOfToken(cu_seqlens, tokens, x.device());
    const auto x32 = x.to(torch::kFloat), w32 = weight.to(torch::kFloat);
    auto acc = torch::zeros_like(x32);
    // Tap j of the kernel reads x[t - (W - 1) + j]; a token before the start of t's document reads 0.
    for (std::int64_t shift = 0; shift < width && shift < tokens; ++shift) {
      const auto shifted = torch::cat({torch::zeros({shift, x.size(1)}, x32.options()), x32.narrow(0, 0, tokens - shift)});
      const auto same_doc =
          torch::cat({torch::zeros({shift}, doc.options().dtype(torch::kBool)),
                      doc.narrow(0, shift, tokens - shift) == doc.narrow(0, 0, tokens - shift)});
      acc = acc + shifted * same_doc.unsqueeze(1).to(torch::kFloat) * w32.select(1, width - 1 - shift).unsqueeze(0);
    }
    return torch::silu(acc).to(x.scalar_type());
  }

  torch::Tensor GatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& A_log,
                               const torch::Tensor& dt_bias, const torch::Tensor& cu_seqlens) override {
    TORCH_CHECK(q.dim() == 3 && q.sizes() == k.sizes(), "GatedDeltaRule: q and k must be [T, H, K], got ", q.sizes(),
                " and ", k.sizes());
    TORCH_CHECK(v.dim() == 3 && v.size(0) == q.size(0), "GatedDeltaRule: v must be [T, HV, V], got ", v.sizes());
    const auto tokens = q.size(0), h = q.size(1), hv = v.size(1), kdim = q.size(2);
    TORCH_CHECK(hv % h == 0, "GatedDeltaRule: value heads ", hv, " not a multiple of key heads ", h);
    TORCH_CHECK(a.sizes() == torch::IntArrayRef({tokens, hv}) && b.sizes() == a.sizes(),
                "GatedDeltaRule: a and b must be [T, HV], got ", a.sizes(), " and ", b.sizes());
    TORCH_CHECK(A_log.numel() == hv && dt_bias.numel() == hv, "GatedDeltaRule: A_log and dt_bias must be [HV]");
    const auto l2norm = [](const torch::Tensor& x) {
      const auto x32 = x.to(torch::kFloat);
      return x32 * torch::rsqrt(x32.pow(2).sum(-1, /*keepdim=*/true) + 1e-6);
    };
    const auto group = hv / h;
    const auto qn = (l2norm(q) * (1.0 / std::sqrt(double(kdim)))).repeat_interleave(group, 1);  // [T, HV, K]
    const auto kn = l2norm(k).repeat_interleave(group, 1);                                     // [T, HV, K]
    const auto v32 = v.to(torch::kFloat);
    const auto decay = torch::exp(-torch::exp(A_log.to(torch::kFloat)) *
                                  torch::softplus(a.to(torch::kFloat) + dt_bias.to(torch::kFloat)));  // exp(g) [T, HV]
    const auto beta = torch::sigmoid(b.to(torch::kFloat));
    const auto doc = DocumentOfToken(cu_seqlens, tokens, torch::kCPU);
    const auto doc_acc = doc.accessor<std::int64_t, 1>();
    auto state = torch::zeros({hv, kdim, v.size(2)}, v32.options());  // S [HV, K, V]
    std::vector<torch::Tensor> out;
    out.reserve(tokens);
    for (std::int64_t t = 0; t < tokens; ++t) {
      if (t > 0 && doc_acc[t] != doc_acc[t - 1]) state = torch::zeros_like(state);
      const auto kt = kn[t];
      state = state * decay[t].view({hv, 1, 1});
      const auto predicted = torch::einsum("hkv,hk->hv", {state, kt});          // S^T k
      const auto u = beta[t].unsqueeze(1) * (v32[t] - predicted);               // [HV, V]
      state = state + kt.unsqueeze(2) * u.unsqueeze(1);
      out.push_back(torch::einsum("hkv,hk->hv", {state, qn[t]}));                // S^T q
    }
    if (tokens == 0) return torch::zeros_like(v);
    return torch::stack(out).to(v.scalar_type());
  }
};

}  // namespace

torch::Tensor DraftMaskDense(const DraftMask& mask, std::int64_t rows) {
  TORCH_CHECK(mask.anchors.defined() && mask.anchors.dim() == 1, "DraftMask: anchors must be int32 [N]");
  TORCH_CHECK(mask.valid.defined() && mask.valid.sizes() == mask.anchors.sizes(),
              "DraftMask: valid must be [N] like anchors");
  TORCH_CHECK(mask.block_size > 0 && mask.window >= 0 && mask.context_len >= 0,
              "DraftMask: block_size must be > 0, window and context_len >= 0");
  const auto n = mask.anchors.size(0), bs = std::int64_t{mask.block_size};
  TORCH_CHECK(rows == n * bs, "DraftMask: ", rows, " query rows, but ", n, " anchors x block ", bs, " = ", n * bs);
  const auto device = mask.anchors.device();
  const auto lopts = torch::TensorOptions().dtype(torch::kLong).device(device);
  const auto s = mask.context_len;
  const auto r = torch::arange(rows, lopts).unsqueeze(1);             // query row [rows, 1]
  const auto block = torch::div(r, bs, "floor");
  const auto offset = r - block * bs;                                  // r mod B
  const auto kv = torch::arange(s + rows, lopts).unsqueeze(0);        // kv row [1, S + rows]
  const auto anchor = mask.anchors.to(torch::kLong).index_select(0, block.squeeze(1)).unsqueeze(1);
  auto context = (kv < s) & (kv < anchor);
  if (mask.window > 0) context = context & (kv >= anchor + offset - (mask.window - 1));
  if (mask.doc_start.defined()) {
    TORCH_CHECK(mask.doc_start.sizes() == mask.anchors.sizes(), "DraftMask: doc_start must be [N] like anchors");
    const auto start = mask.doc_start.to(device, torch::kLong).index_select(0, block.squeeze(1)).unsqueeze(1);
    context = context & (kv >= start);
  }
  const auto kv_block = torch::div(kv - s, bs, "floor");
  auto own_block = (kv >= s) & (kv_block == block);
  if (mask.window > 0) own_block = own_block & (kv - s - kv_block * bs <= offset);
  const auto valid = mask.valid.to(device).ne(0).index_select(0, block.squeeze(1)).unsqueeze(1);
  return (context | own_block) & valid;
}

torch::Tensor CausalMaskDense(const torch::Tensor& cu_seqlens, std::int64_t tokens, const torch::Device& device) {
  const auto doc = DocumentOfToken(cu_seqlens, tokens, device);
  const auto pos = torch::arange(tokens, torch::TensorOptions().dtype(torch::kLong).device(device));
  return (doc.unsqueeze(1) == doc.unsqueeze(0)) & (pos.unsqueeze(0) <= pos.unsqueeze(1));
}

std::unique_ptr<Ops> MakeReferenceOps() { return std::make_unique<ReferenceOps>(); }

}  // namespace dflash::trainer
