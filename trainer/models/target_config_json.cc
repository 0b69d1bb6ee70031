#include "trainer/models/target_config_json.h"

#include <span>
#include <string>

#include "base/atomic_file.h"

namespace dflash::trainer {

nlohmann::json TargetConfigJson(const setup::TargetConfig& c) {
  const bool hybrid = c.arch == setup::TargetArch::kQwen3_5Hybrid;
  nlohmann::json text = {
      {"model_type", hybrid ? "qwen3_5_text" : "qwen3"},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"vocab_size", c.vocab_size},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"rms_norm_eps", c.rms_norm_eps},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"attention_bias", c.attention_bias},
      {"hidden_act", "silu"},
  };
  if (!hybrid) {
    text["architectures"] = {"Qwen3ForCausalLM"};
    text["rope_theta"] = c.rope_theta;
    if (c.partial_rotary_factor != 1.0) text["partial_rotary_factor"] = c.partial_rotary_factor;
    return text;
  }
  nlohmann::json types = nlohmann::json::array();
  for (auto kind : c.layer_kinds) {
    types.push_back(kind == setup::TargetLayerKind::kFullAttention ? "full_attention" : "linear_attention");
  }
  text["layer_types"] = types;
  text["full_attention_interval"] = c.full_attention_interval;
  text["attn_output_gate"] = c.attn_output_gate;
  text["linear_num_key_heads"] = c.linear_num_key_heads;
  text["linear_num_value_heads"] = c.linear_num_value_heads;
  text["linear_key_head_dim"] = c.linear_key_head_dim;
  text["linear_value_head_dim"] = c.linear_value_head_dim;
  text["linear_conv_kernel_dim"] = c.linear_conv_kernel_dim;
  text["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", c.rope_theta}, {"partial_rotary_factor", c.partial_rotary_factor}};
  if (c.weight_prefix != "model.language_model.") {
    text["architectures"] = {"Qwen3_5ForCausalLM"};
    return text;
  }
  return {{"model_type", "qwen3_5"},
          {"architectures", {"Qwen3_5ForConditionalGeneration"}},
          {"tie_word_embeddings", c.tie_word_embeddings},
          {"text_config", text}};
}

Status WriteTargetConfig(const std::filesystem::path& path, const setup::TargetConfig& config) {
  return AtomicWriteText(path, TargetConfigJson(config).dump(2) + "\n");
}

}  // namespace dflash::trainer
