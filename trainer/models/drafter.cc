#include "trainer/models/drafter.h"


#include <cmath>

#include "trainer/models/drafter_config.h"
#include "trainer/models/init_generator.h"
#include "trainer/nn/layers.h"

namespace dflash::trainer {

std::vector<Drafter::ParamSpec> Drafter::Layout(const setup::DrafterConfig& c) {
  const std::int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const std::int64_t q_out = c.num_attention_heads * D, kv_out = c.num_key_value_heads * D;
  const auto taps = static_cast<std::int64_t>(c.target_layer_ids.size());
  std::vector<ParamSpec> out = {{"fc.weight", {H, taps * H}, false}, {"hidden_norm.weight", {H}, true}};
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {H}, true});
    out.push_back({p + "self_attn.q_proj.weight", {q_out, H}, false});
    out.push_back({p + "self_attn.k_proj.weight", {kv_out, H}, false});
    out.push_back({p + "self_attn.v_proj.weight", {kv_out, H}, false});
    out.push_back({p + "self_attn.o_proj.weight", {H, q_out}, false});
    out.push_back({p + "self_attn.q_norm.weight", {D}, true});
    out.push_back({p + "self_attn.k_norm.weight", {D}, true});
    out.push_back({p + "post_attention_layernorm.weight", {H}, true});
    out.push_back({p + "mlp.gate_proj.weight", {I, H}, false});
    out.push_back({p + "mlp.up_proj.weight", {I, H}, false});
    out.push_back({p + "mlp.down_proj.weight", {H, I}, false});
  }
  out.push_back({"norm.weight", {H}, true});
  return out;
}

Result<std::unique_ptr<Drafter>> Drafter::Build(setup::DrafterConfig config, torch::Device device,
                                                const ParamSource& source) {
  std::unique_ptr<Drafter> d(new Drafter(std::move(config)));
  for (const ParamSpec& spec : Layout(d->config_)) {
    DFLASH_ASSIGN_OR_RETURN(torch::Tensor value, source(spec));
    TORCH_CHECK(value.sizes() == torch::IntArrayRef(spec.shape), "drafter: parameter ", spec.name, " is ",
                value.sizes(), ", expected ", spec.shape);
    d->params_.emplace_back(spec.name, value.detach().to(device, torch::kFloat).contiguous().requires_grad_(true));
  }
  // Handles into params_ in Layout order (the same tensors: gradients and optimizer updates are shared).
  std::size_t next = 0;
  auto take = [&]() -> const torch::Tensor& { return d->params_.at(next++).second; };
  d->fc_ = take();
  d->hidden_norm_ = take();
  for (std::int64_t i = 0; i < d->config_.num_hidden_layers; ++i) {
    Layer l;
    for (torch::Tensor* t : {&l.input_layernorm, &l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.q_norm, &l.k_norm,
                             &l.post_attention_layernorm, &l.gate_proj, &l.up_proj, &l.down_proj}) {
      *t = take();
    }
    d->layers_.push_back(std::move(l));
  }
  d->norm_ = take();
  return d;
}

std::unique_ptr<Drafter> Drafter::Create(const setup::DrafterConfig& config, torch::Device device, std::uint64_t seed) {
  auto resolved = ResolveDrafterConfig(config);
  TORCH_CHECK(resolved.ok(), resolved.status().message());
  // Drawn on `device` in Layout order from one generator (init_generator.h: the same weights on every device of one
  // type; the 1.7 B parameters of the 27B drafter took ~7 s drawn on the CPU, well under 1 s on a GPU).
  auto gen = InitGenerator(seed, device);
  const auto fp32 = torch::TensorOptions().dtype(torch::kFloat).device(device);
  auto built = Build(std::move(*resolved), device, [&](const ParamSpec& spec) -> Result<torch::Tensor> {
    if (spec.is_norm) return torch::ones(spec.shape, fp32);
    return torch::empty(spec.shape, fp32).normal_(0.0, 0.02, gen);
  });
  TORCH_CHECK(built.ok(), built.status().message());
  return std::move(*built);
}

torch::Tensor Drafter::Forward(const torch::Tensor& features, const torch::Tensor& block_tokens,
                               const torch::Tensor& block_positions, const torch::Tensor& context_positions,
                               const DraftMask& mask, const torch::Tensor& embed, torch::Dtype compute_dtype,
                               DrafterOps& ops) const {
  const setup::DrafterConfig& c = config_;
  const std::int64_t H = c.hidden_size, D = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  TORCH_CHECK(features.dim() == 2 && features.size(1) == num_taps() * H, "drafter: features must be [S, ",
              num_taps() * H, "], got ", features.sizes());
  const std::int64_t S = features.size(0);
  TORCH_CHECK(block_tokens.dim() == 1 && block_positions.sizes() == block_tokens.sizes(),
              "drafter: block_tokens ", block_tokens.sizes(), " and block_positions ", block_positions.sizes(),
              " must be the same [N*B]");
  TORCH_CHECK(context_positions.dim() == 1 && context_positions.size(0) == S, "drafter: context_positions ",
              context_positions.sizes(), " must be [", S, "]");
  const std::int64_t rows = block_tokens.size(0);
  TORCH_CHECK(mask.context_len == S, "drafter: mask.context_len ", mask.context_len, " != context rows ", S);
  TORCH_CHECK(mask.block_size >= 1 && mask.block_size <= c.block_size, "drafter: mask.block_size ", mask.block_size,
              " outside 1 ... the drafter's block_size ", c.block_size);
  TORCH_CHECK(mask.anchors.defined() && mask.anchors.numel() * mask.block_size == rows, "drafter: ",
              mask.anchors.defined() ? mask.anchors.numel() : 0, " anchors x block ", mask.block_size, " != ", rows,
              " block rows");
  TORCH_CHECK(embed.dim() == 2 && embed.size(1) == H, "drafter: embed must be [vocab, ", H, "], got ", embed.sizes());

  const double eps = c.rms_norm_eps;
  auto norm = [&](const torch::Tensor& x, const torch::Tensor& w) { return ops.TrainedRmsNorm(x, w, eps); };

  // Shared by all layers: the context projection and the rotary tables of the KV rows (context, then blocks); the
  // query rows are the block rows of the same tables.
  const auto ctx = norm(nn::Linear(features.detach().to(compute_dtype), fc_), hidden_norm_);  // [S, H]
  const auto kv_positions = torch::cat({context_positions, block_positions}).to(torch::kLong);
  const nn::RopeTables rope_kv = nn::MakeRope(kv_positions, D, c.rope_theta);
  const nn::RopeTables rope_q{rope_kv.cos.narrow(0, S, rows), rope_kv.sin.narrow(0, S, rows), D};
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));

  auto h = embed.detach().index_select(0, block_tokens.to(torch::kLong)).to(compute_dtype);  // [N*B, H]
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    const auto x = norm(h, l.input_layernorm);
    const auto kv_in = torch::cat({ctx, x});                                               // [S + N*B, H]
    auto q = norm(nn::Linear(x, l.q_proj).view({rows, Hq, D}), l.q_norm);
    auto k = norm(nn::Linear(kv_in, l.k_proj).view({S + rows, Hkv, D}), l.k_norm);
    const auto v = nn::Linear(kv_in, l.v_proj).view({S + rows, Hkv, D});
    q = ops.TrainedRope(q, rope_q);
    k = ops.TrainedRope(k, rope_kv);
    DraftMask layer_mask = mask;
    layer_mask.window = c.layer_kinds[i] == setup::DrafterLayerKind::kSlidingAttention ? *c.sliding_window : 0;
    const auto attn = ops.DraftAttention(q, k, v, layer_mask, scale).reshape({rows, Hq * D});
    h = h + nn::Linear(attn, l.o_proj);
    h = h + nn::SwiGluMlp(norm(h, l.post_attention_layernorm), l.gate_proj, l.up_proj, l.down_proj);
  }
  return norm(h, norm_);
}

}  // namespace dflash::trainer
