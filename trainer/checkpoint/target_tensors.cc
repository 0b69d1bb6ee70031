#include "trainer/checkpoint/target_tensors.h"

namespace dflash::trainer {
namespace {

TensorSpec Spec(std::string name, std::vector<std::int64_t> shape) {
  return TensorSpec{std::move(name), std::move(shape), std::nullopt};
}

}  // namespace

std::string TargetEmbeddingName(const setup::TargetConfig& c) { return c.weight_prefix + "embed_tokens.weight"; }

std::string TargetLmHeadName(const setup::TargetConfig& c) {
  return c.tie_word_embeddings ? TargetEmbeddingName(c) : "lm_head.weight";
}

std::vector<TensorSpec> TargetLayerTensors(const setup::TargetConfig& c, std::int64_t layer) {
  const std::string p = c.weight_prefix + "layers." + std::to_string(layer) + ".";
  const std::int64_t h = c.hidden_size;
  std::vector<TensorSpec> out;
  out.push_back(Spec(p + "input_layernorm.weight", {h}));
  const bool full = c.layer_kinds.at(static_cast<std::size_t>(layer)) == setup::TargetLayerKind::kFullAttention;
  if (full) {
    const std::int64_t q = c.num_attention_heads * c.head_dim;
    const std::int64_t kv = c.num_key_value_heads * c.head_dim;
    const std::string a = p + "self_attn.";
    out.push_back(Spec(a + "q_proj.weight", {c.attn_output_gate ? 2 * q : q, h}));
    out.push_back(Spec(a + "k_proj.weight", {kv, h}));
    out.push_back(Spec(a + "v_proj.weight", {kv, h}));
    if (c.attention_bias) {
      out.push_back(Spec(a + "q_proj.bias", {c.attn_output_gate ? 2 * q : q}));
      out.push_back(Spec(a + "k_proj.bias", {kv}));
      out.push_back(Spec(a + "v_proj.bias", {kv}));
    }
    out.push_back(Spec(a + "o_proj.weight", {h, q}));
    out.push_back(Spec(a + "q_norm.weight", {c.head_dim}));
    out.push_back(Spec(a + "k_norm.weight", {c.head_dim}));
  } else {
    const std::int64_t key_dim = c.linear_num_key_heads * c.linear_key_head_dim;
    const std::int64_t value_dim = c.linear_num_value_heads * c.linear_value_head_dim;
    const std::int64_t conv_dim = 2 * key_dim + value_dim;
    const std::int64_t nv = c.linear_num_value_heads;
    const std::string a = p + "linear_attn.";
    out.push_back(Spec(a + "in_proj_qkv.weight", {conv_dim, h}));
    out.push_back(Spec(a + "in_proj_z.weight", {value_dim, h}));
    out.push_back(Spec(a + "in_proj_b.weight", {nv, h}));
    out.push_back(Spec(a + "in_proj_a.weight", {nv, h}));
    out.push_back(Spec(a + "conv1d.weight", {conv_dim, 1, c.linear_conv_kernel_dim}));
    out.push_back(Spec(a + "A_log", {nv}));
    out.push_back(Spec(a + "dt_bias", {nv}));
    out.push_back(Spec(a + "norm.weight", {c.linear_value_head_dim}));
    out.push_back(Spec(a + "out_proj.weight", {h, value_dim}));
  }
  out.push_back(Spec(p + "post_attention_layernorm.weight", {h}));
  out.push_back(Spec(p + "mlp.gate_proj.weight", {c.intermediate_size, h}));
  out.push_back(Spec(p + "mlp.up_proj.weight", {c.intermediate_size, h}));
  out.push_back(Spec(p + "mlp.down_proj.weight", {h, c.intermediate_size}));
  return out;
}

Result<std::vector<TensorSpec>> TargetTensorsNeeded(const setup::TargetConfig& c, std::int64_t last_layer) {
  if (last_layer < 0 || last_layer >= c.num_hidden_layers) {
    return InvalidArgument("last tapped layer " + std::to_string(last_layer) + " is outside the target's " +
                           std::to_string(c.num_hidden_layers) + " layers");
  }
  if (static_cast<std::int64_t>(c.layer_kinds.size()) != c.num_hidden_layers) {
    return InvalidArgument("target config has " + std::to_string(c.layer_kinds.size()) + " layer kinds for " +
                           std::to_string(c.num_hidden_layers) + " layers");
  }
  std::vector<TensorSpec> out;
  out.push_back(Spec(TargetEmbeddingName(c), {c.vocab_size, c.hidden_size}));
  for (std::int64_t i = 0; i <= last_layer; ++i) {
    auto layer = TargetLayerTensors(c, i);
    out.insert(out.end(), std::make_move_iterator(layer.begin()), std::make_move_iterator(layer.end()));
  }
  if (!c.tie_word_embeddings) out.push_back(Spec(TargetLmHeadName(c), {c.vocab_size, c.hidden_size}));
  return out;
}

}  // namespace dflash::trainer
