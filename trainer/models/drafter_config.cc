#include "trainer/models/drafter_config.h"

#include <string>

#include "trainer/models/target_config_json.h"

namespace dflash::trainer {
namespace {

std::string S(std::int64_t v) { return std::to_string(v); }

Status Bad(const std::string& what) { return InvalidArgument("drafter config: " + what); }

}  // namespace

Result<setup::DrafterConfig> ResolveDrafterConfig(const setup::DrafterConfig& config) {
  setup::DrafterConfig c = config;
  if (c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_hidden_layers <= 0 || c.head_dim <= 0 ||
      c.num_attention_heads <= 0 || c.num_key_value_heads <= 0) {
    return Bad("hidden_size, intermediate_size, num_hidden_layers, head_dim and the head counts must be positive");
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return Bad("num_attention_heads " + S(c.num_attention_heads) +
                           " is not a multiple of num_key_value_heads " + S(c.num_key_value_heads));
  }
  if (c.head_dim % 2 != 0) return Bad("head_dim " + S(c.head_dim) + " must be even (RoPE)");
  if (!(c.rope_theta > 0)) return Bad("rope_theta must be positive");
  if (!(c.rms_norm_eps > 0)) return Bad("rms_norm_eps must be positive");
  if (c.block_size < 2) return Bad("block_size must be at least 2, got " + S(c.block_size));
  if (c.mask_token_id < 0 || (c.vocab_size > 0 && c.mask_token_id >= c.vocab_size)) {
    return Bad("mask_token_id " + S(c.mask_token_id) + " is outside the vocabulary");
  }
  if (c.layer_kinds.empty()) c.layer_kinds.assign(c.num_hidden_layers, setup::DrafterLayerKind::kFullAttention);
  if (static_cast<std::int64_t>(c.layer_kinds.size()) != c.num_hidden_layers) {
    return Bad(S(static_cast<std::int64_t>(c.layer_kinds.size())) + " layer kinds for " +
                           S(c.num_hidden_layers) + " layers");
  }
  for (auto kind : c.layer_kinds) {
    if (kind == setup::DrafterLayerKind::kSlidingAttention && !(c.sliding_window && *c.sliding_window > 0)) {
      return Bad("sliding_attention layers need a positive sliding_window");
    }
  }
  if (c.target_layer_ids.empty()) {
    if (!c.num_target_layers) {
      return Bad("neither target_layer_ids nor num_target_layers is set: the feature width is unknown");
    }
    DFLASH_ASSIGN_OR_RETURN(c.target_layer_ids, setup::TappedLayers(*c.num_target_layers, c.num_hidden_layers));
  }
  return c;
}

nlohmann::ordered_json DrafterConfigJson(const setup::DrafterConfig& c, torch::Dtype dtype) {
  using json = nlohmann::ordered_json;
  json layer_types = json::array();
  bool any_sliding = false;
  for (auto kind : c.layer_kinds) {
    const bool sliding = kind == setup::DrafterLayerKind::kSlidingAttention;
    any_sliding |= sliding;
    layer_types.push_back(sliding ? "sliding_attention" : "full_attention");
  }
  json j = json::object();
  j["architectures"] = json::array({"DFlashDraftModel"});
  j["auto_map"] = {{"AutoModel", "dflash.DFlashDraftModel"}};
  j["model_type"] = "qwen3";
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["block_size"] = c.block_size;
  j["dflash_config"] = {{"block_size", c.block_size},
                        {"mask_token_id", c.mask_token_id},
                        {"target_layer_ids", c.target_layer_ids}};
  j["dtype"] = HfDtypeName(dtype);
  j["torch_dtype"] = HfDtypeName(dtype);
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = c.intermediate_size;
  j["layer_types"] = layer_types;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_key_value_heads"] = c.num_key_value_heads;
  if (c.num_target_layers) j["num_target_layers"] = *c.num_target_layers;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_parameters"] = {{"rope_theta", c.rope_theta}, {"rope_type", "default"}};
  j["sliding_window"] = c.sliding_window ? json(*c.sliding_window) : json(nullptr);
  j["use_sliding_window"] = any_sliding;
  j["tie_word_embeddings"] = false;
  j["use_cache"] = true;
  if (c.vocab_size > 0) j["vocab_size"] = c.vocab_size;
  return j;
}

}  // namespace dflash::trainer
