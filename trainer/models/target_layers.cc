#include "trainer/models/target_layers.h"

#include <cmath>

namespace dflash::trainer {
namespace {

// x @ W^T (+ b when the config has attention biases).
torch::Tensor Project(const torch::Tensor& x, const std::string& name, const TargetForwardContext& ctx,
                      bool may_have_bias) {
  auto y = nn::Linear(x, TargetWeight(ctx.weights, name + ".weight"));
  if (may_have_bias && ctx.config.attention_bias) {
    y = y + TargetWeight(ctx.weights, name + ".bias").to(y.scalar_type());
  }
  return y;
}

}  // namespace

nn::NormKind TargetNormKind(const setup::TargetConfig& c) {
  return c.arch == setup::TargetArch::kQwen3_5Hybrid ? nn::NormKind::kZeroCentred : nn::NormKind::kStandard;
}

const torch::Tensor& TargetWeight(const TargetWeights& weights, const std::string& name) {
  auto it = weights.find(name);
  TORCH_CHECK(it != weights.end(), "target weight ", name, " is not loaded");
  return it->second;
}

torch::Tensor DocumentPositions(const torch::Tensor& cu_seqlens, std::int64_t tokens, const torch::Device& device) {
  auto positions = torch::arange(tokens, torch::kLong);
  if (cu_seqlens.defined()) {
    TORCH_CHECK(cu_seqlens.dim() == 1 && cu_seqlens.scalar_type() == torch::kInt && cu_seqlens.device().is_cpu(),
                "cu_seqlens must be int32 [docs + 1] on the CPU, got ", cu_seqlens.sizes(), " ",
                cu_seqlens.scalar_type(), " on ", cu_seqlens.device());
    const auto cu = cu_seqlens.contiguous();
    const auto* p = cu.data_ptr<std::int32_t>();
    const std::int64_t n = cu.numel();
    TORCH_CHECK(n >= 2 && p[0] == 0 && p[n - 1] == tokens, "cu_seqlens must run from 0 to the ", tokens,
                " tokens, got ", cu_seqlens);
    auto* pos = positions.data_ptr<std::int64_t>();
    for (std::int64_t d = 0; d + 1 < n; ++d) {
      TORCH_CHECK(p[d] <= p[d + 1], "cu_seqlens must be non-decreasing, got ", cu_seqlens);
      for (std::int64_t t = p[d]; t < p[d + 1]; ++t) pos[t] = t - p[d];
    }
  }
  return positions.to(device);
}

torch::Tensor TargetGatedDeltaNet(const torch::Tensor& x, const std::string& a, const TargetForwardContext& ctx) {
  const setup::TargetConfig& c = ctx.config;
  const std::int64_t t = x.size(0);
  const std::int64_t key_dim = c.linear_num_key_heads * c.linear_key_head_dim;
  const std::int64_t value_dim = c.linear_num_value_heads * c.linear_value_head_dim;
  const std::int64_t conv_dim = 2 * key_dim + value_dim;

  const auto qkv = nn::Linear(x, TargetWeight(ctx.weights, a + "in_proj_qkv.weight"));  // [T, q | k | v]
  const auto z = nn::Linear(x, TargetWeight(ctx.weights, a + "in_proj_z.weight"));
  const auto b = nn::Linear(x, TargetWeight(ctx.weights, a + "in_proj_b.weight"));
  const auto gate_a = nn::Linear(x, TargetWeight(ctx.weights, a + "in_proj_a.weight"));
  // HF stores the depthwise conv as [C, 1, W].
  const auto conv_w = TargetWeight(ctx.weights, a + "conv1d.weight").reshape({conv_dim, c.linear_conv_kernel_dim});
  const auto mixed = ctx.ops.CausalConv1dSilu(qkv, conv_w.to(qkv.scalar_type()), ctx.cu_seqlens);

  const auto q = mixed.narrow(1, 0, key_dim).reshape({t, c.linear_num_key_heads, c.linear_key_head_dim});
  const auto k = mixed.narrow(1, key_dim, key_dim).reshape({t, c.linear_num_key_heads, c.linear_key_head_dim});
  const auto v =
      mixed.narrow(1, 2 * key_dim, value_dim).reshape({t, c.linear_num_value_heads, c.linear_value_head_dim});
  const auto o = ctx.ops.GatedDeltaRule(q, k, v, gate_a, b, TargetWeight(ctx.weights, a + "A_log").to(torch::kFloat),
                                        TargetWeight(ctx.weights, a + "dt_bias").to(torch::kFloat), ctx.cu_seqlens);
  const auto normed = ctx.ops.GatedRmsNorm(o, TargetWeight(ctx.weights, a + "norm.weight"),
                                           z.reshape({t, c.linear_num_value_heads, c.linear_value_head_dim}),
                                           c.rms_norm_eps);
  return nn::Linear(normed.reshape({t, value_dim}).to(x.scalar_type()),
                    TargetWeight(ctx.weights, a + "out_proj.weight"));
}

torch::Tensor TargetFullAttention(const torch::Tensor& x, const std::string& a, const TargetForwardContext& ctx) {
  const setup::TargetConfig& c = ctx.config;
  const std::int64_t t = x.size(0), hq = c.num_attention_heads, hkv = c.num_key_value_heads, d = c.head_dim;
  const auto kind = TargetNormKind(c);

  auto q = Project(x, a + "q_proj", ctx, true);
  torch::Tensor gate;
  if (c.attn_output_gate) {
    // Per head [query | gate], as HF's view(..., heads, 2 * head_dim).chunk(2).
    const auto qg = q.reshape({t, hq, 2 * d});
    q = qg.narrow(2, 0, d);
    gate = qg.narrow(2, d, d).reshape({t, hq * d});
  } else {
    q = q.reshape({t, hq, d});
  }
  auto k = Project(x, a + "k_proj", ctx, true).reshape({t, hkv, d});
  const auto v = Project(x, a + "v_proj", ctx, true).reshape({t, hkv, d});
  q = ctx.ops.RmsNorm(q, TargetWeight(ctx.weights, a + "q_norm.weight"), c.rms_norm_eps, kind);
  k = ctx.ops.RmsNorm(k, TargetWeight(ctx.weights, a + "k_norm.weight"), c.rms_norm_eps, kind);
  q = ctx.ops.Rope(q, ctx.rope);
  k = ctx.ops.Rope(k, ctx.rope);
  auto o = ctx.ops.CausalAttention(q.contiguous(), k.contiguous(), v.contiguous(), ctx.cu_seqlens,
                                   1.0 / std::sqrt(static_cast<double>(d)))
               .reshape({t, hq * d});
  if (gate.defined()) o = o * torch::sigmoid(gate);
  return nn::Linear(o, TargetWeight(ctx.weights, a + "o_proj.weight"));
}

namespace {

std::string LayerPrefix(const setup::TargetConfig& c, std::int64_t layer) {
  return c.weight_prefix + "layers." + std::to_string(layer) + ".";
}

// The token mixer of `layer` on its normed input x.
torch::Tensor Mixer(const torch::Tensor& x, std::int64_t layer, const TargetForwardContext& ctx) {
  const std::string p = LayerPrefix(ctx.config, layer);
  const bool full = ctx.config.layer_kinds.at(static_cast<std::size_t>(layer)) == setup::TargetLayerKind::kFullAttention;
  return full ? TargetFullAttention(x, p + "self_attn.", ctx) : TargetGatedDeltaNet(x, p + "linear_attn.", ctx);
}

torch::Tensor Mlp(const torch::Tensor& y, std::int64_t layer, const TargetForwardContext& ctx) {
  const std::string p = LayerPrefix(ctx.config, layer);
  const auto gate = nn::Linear(y, TargetWeight(ctx.weights, p + "mlp.gate_proj.weight"));
  const auto up = nn::Linear(y, TargetWeight(ctx.weights, p + "mlp.up_proj.weight"));
  return nn::Linear(ctx.ops.SwiGlu(gate, up), TargetWeight(ctx.weights, p + "mlp.down_proj.weight"));
}

const torch::Tensor& NormWeight(std::int64_t layer, const char* name, const TargetForwardContext& ctx) {
  return TargetWeight(ctx.weights, LayerPrefix(ctx.config, layer) + name);
}

}  // namespace

torch::Tensor TargetDecoderLayer(const torch::Tensor& h, std::int64_t layer, const TargetForwardContext& ctx) {
  const setup::TargetConfig& c = ctx.config;
  const auto kind = TargetNormKind(c);
  const auto x = ctx.ops.RmsNorm(h, NormWeight(layer, "input_layernorm.weight", ctx), c.rms_norm_eps, kind);
  const auto mixed = Mixer(x, layer, ctx);
  const auto [h1, y] =
      ctx.ops.AddRmsNorm(h, mixed, NormWeight(layer, "post_attention_layernorm.weight", ctx), c.rms_norm_eps, kind);
  return h1 + Mlp(y, layer, ctx);
}

torch::Tensor TargetDecoderLayers(torch::Tensor h, std::int64_t first, std::int64_t last,
                                  const TargetForwardContext& ctx,
                                  const std::function<void(std::int64_t, const torch::Tensor&)>& on_output) {
  const setup::TargetConfig& c = ctx.config;
  const auto kind = TargetNormKind(c);
  torch::Tensor delta;  // the previous layer's MLP output, not yet added to h
  for (std::int64_t layer = first; layer <= last; ++layer) {
    const auto& w_in = NormWeight(layer, "input_layernorm.weight", ctx);
    torch::Tensor x;
    if (delta.defined()) {
      std::tie(h, x) = ctx.ops.AddRmsNorm(h, delta, w_in, c.rms_norm_eps, kind);
      on_output(layer - 1, h);
    } else {
      x = ctx.ops.RmsNorm(h, w_in, c.rms_norm_eps, kind);
    }
    const auto mixed = Mixer(x, layer, ctx);
    torch::Tensor y;
    std::tie(h, y) =
        ctx.ops.AddRmsNorm(h, mixed, NormWeight(layer, "post_attention_layernorm.weight", ctx), c.rms_norm_eps, kind);
    delta = Mlp(y, layer, ctx);
  }
  if (delta.defined()) {
    h = h + delta;
    on_output(last, h);
  }
  return h;
}

}  // namespace dflash::trainer
