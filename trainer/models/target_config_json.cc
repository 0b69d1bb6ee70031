#include "trainer/models/target_config_json.h"

#include <span>
#include <string>

#include "base/atomic_file.h"

namespace dflash::trainer {

std::string HfDtypeName(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kBFloat16: return "bfloat16";
    case torch::kFloat16: return "float16";
    case torch::kFloat32: return "float32";
    default: return std::string(c10::toString(dtype));
  }
}

nlohmann::json TargetConfigJson(const setup::TargetConfig& c, torch::Dtype dtype) {
  const bool hybrid = c.arch == setup::TargetArch::kQwen3_5Hybrid;
  const std::string dtype_name = HfDtypeName(dtype);
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
      {"max_position_embeddings", c.max_position_embeddings},
      {"dtype", dtype_name},
      {"torch_dtype", dtype_name},
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
  // As transformers saves the multimodal wrapper: the weights' dtype on the outer config only.
  text.erase("dtype");
  text.erase("torch_dtype");
  return {{"model_type", "qwen3_5"},
          {"architectures", {"Qwen3_5ForConditionalGeneration"}},
          {"tie_word_embeddings", c.tie_word_embeddings},
          {"dtype", dtype_name},
          {"torch_dtype", dtype_name},
          {"text_config", text}};
}

Status WriteTargetConfig(const std::filesystem::path& path, const setup::TargetConfig& config, torch::Dtype dtype) {
  return AtomicWriteText(path, TargetConfigJson(config, dtype).dump(2) + "\n");
}

}  // namespace dflash::trainer
