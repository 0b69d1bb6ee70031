#include "setup/model_config.h"

#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

namespace dflash::setup {
namespace {

using json = nlohmann::json;

const char* TypeName(const json& v) { return v.type_name(); }

// Field readers: `obj` is the object holding the field, `where` names the file (and nested object) for errors.
Result<std::int64_t> GetInt(const json& obj, const std::string& key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return InvalidArgument(where + ": field \"" + key + "\" is missing");
  if (!it->is_number_integer()) {
    return InvalidArgument(where + ": field \"" + key + "\" must be an integer, got " + TypeName(*it) + " " +
                           it->dump());
  }
  return it->get<std::int64_t>();
}

Result<std::int64_t> GetPositiveInt(const json& obj, const std::string& key, const std::string& where) {
  DFLASH_ASSIGN_OR_RETURN(std::int64_t v, GetInt(obj, key, where));
  if (v <= 0) return InvalidArgument(where + ": field \"" + key + "\" must be positive, got " + std::to_string(v));
  return v;
}

Result<std::int64_t> GetIntOr(const json& obj, const std::string& key, std::int64_t fallback,
                              const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  return GetInt(obj, key, where);
}

Result<double> GetNumber(const json& obj, const std::string& key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return InvalidArgument(where + ": field \"" + key + "\" is missing");
  if (!it->is_number()) {
    return InvalidArgument(where + ": field \"" + key + "\" must be a number, got " + TypeName(*it) + " " +
                           it->dump());
  }
  return it->get<double>();
}

Result<bool> GetBoolOr(const json& obj, const std::string& key, bool fallback, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return InvalidArgument(where + ": field \"" + key + "\" must be true or false, got " + it->dump());
  }
  return it->get<bool>();
}

Result<std::string> GetString(const json& obj, const std::string& key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return InvalidArgument(where + ": field \"" + key + "\" is missing");
  if (!it->is_string()) return InvalidArgument(where + ": field \"" + key + "\" must be a string, got " + it->dump());
  return it->get<std::string>();
}

Result<std::vector<std::string>> GetStringList(const json& obj, const std::string& key, const std::string& where) {
  const json& v = obj.at(key);
  if (!v.is_array()) return InvalidArgument(where + ": field \"" + key + "\" must be a list of strings");
  std::vector<std::string> out;
  for (const auto& s : v) {
    if (!s.is_string()) return InvalidArgument(where + ": field \"" + key + "\" holds a non-string " + s.dump());
    out.push_back(s.get<std::string>());
  }
  return out;
}

bool Has(const json& obj, const std::string& key) { return obj.contains(key) && !obj.at(key).is_null(); }

// rope_theta / partial_rotary_factor live at top level (older transformers) or under "rope_parameters" (newer).
Result<double> GetRopeField(const json& cfg, const std::string& key, std::optional<double> fallback,
                            const std::string& where) {
  if (Has(cfg, key)) return GetNumber(cfg, key, where);
  for (const char* nested : {"rope_parameters", "rope_scaling"}) {
    if (Has(cfg, nested) && cfg.at(nested).is_object() && Has(cfg.at(nested), key)) {
      return GetNumber(cfg.at(nested), key, where + "." + nested);
    }
  }
  if (fallback) return *fallback;
  return InvalidArgument(where + ": field \"" + key + "\" is missing (looked at top level and in rope_parameters)");
}

Result<json> ReadConfigJson(const std::filesystem::path& path, std::string* where) {
  std::error_code ec;
  const std::filesystem::path file = std::filesystem::is_directory(path, ec) ? path / "config.json" : path;
  *where = file.string();
  std::ifstream in(file, std::ios::binary);
  if (!in) return NotFound("cannot open model config " + file.string());
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    json j = json::parse(ss.str());
    if (!j.is_object()) return InvalidArgument(file.string() + ": not a JSON object");
    return j;
  } catch (const json::exception& e) {
    return InvalidArgument(file.string() + " is not valid JSON: " + e.what());
  }
}

// Round-half-to-even of num/den (den > 0, num >= 0), exactly, as Python's round() does for these values.
std::int64_t RoundHalfEven(std::int64_t num, std::int64_t den) {
  std::int64_t q = num / den;
  const std::int64_t r2 = 2 * (num % den);
  if (r2 > den || (r2 == den && (q % 2) != 0)) ++q;
  return q;
}

// Query/KV heads (GQA: a multiple) and head_dim (default: `default_head_dim`, else hidden_size / heads), shared by
// target and drafter configs; c.hidden_size must already be set.
template <typename Config>
Status ParseAttentionShape(const json& j, const std::string& where, Config& c, std::int64_t default_head_dim = 0) {
  DFLASH_ASSIGN_OR_RETURN(c.num_attention_heads, GetPositiveInt(j, "num_attention_heads", where));
  DFLASH_ASSIGN_OR_RETURN(c.num_key_value_heads, GetPositiveInt(j, "num_key_value_heads", where));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return InvalidArgument(where + ": num_attention_heads " + std::to_string(c.num_attention_heads) +
                           " is not a multiple of num_key_value_heads " + std::to_string(c.num_key_value_heads));
  }
  if (Has(j, "head_dim")) {
    DFLASH_ASSIGN_OR_RETURN(c.head_dim, GetPositiveInt(j, "head_dim", where));
  } else {
    c.head_dim = default_head_dim > 0 ? default_head_dim : c.hidden_size / c.num_attention_heads;
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<std::int64_t>> TappedLayers(std::int64_t num_target_layers, std::int64_t num_drafter_layers) {
  if (num_drafter_layers < 1) {
    return InvalidArgument("tapped layers: the drafter needs at least one layer, got " +
                           std::to_string(num_drafter_layers));
  }
  if (num_target_layers < 5) {
    return InvalidArgument("tapped layers: the target needs at least 5 layers, got " +
                           std::to_string(num_target_layers));
  }
  if (num_drafter_layers == 1) return std::vector<std::int64_t>{num_target_layers / 2};
  std::vector<std::int64_t> taps;
  const std::int64_t span = num_target_layers - 4, den = num_drafter_layers - 1;
  for (std::int64_t i = 0; i < num_drafter_layers; ++i) taps.push_back(RoundHalfEven(den + i * span, den));
  return taps;
}

Result<std::vector<std::int64_t>> ResolveTappedLayers(const DrafterConfig& drafter, const TargetConfig& target) {
  if (drafter.num_target_layers && *drafter.num_target_layers != target.num_hidden_layers) {
    return InvalidArgument("drafter was built for a " + std::to_string(*drafter.num_target_layers) +
                           "-layer target (num_target_layers) but the target has " +
                           std::to_string(target.num_hidden_layers) + " layers");
  }
  if (drafter.target_layer_ids.empty()) return TappedLayers(target.num_hidden_layers, drafter.num_hidden_layers);
  for (std::int64_t id : drafter.target_layer_ids) {
    if (id >= target.num_hidden_layers) {
      return InvalidArgument("drafter target_layer_ids holds layer " + std::to_string(id) + " but the target has " +
                             std::to_string(target.num_hidden_layers) + " layers");
    }
  }
  return drafter.target_layer_ids;
}

std::int64_t TargetRotaryDim(const TargetConfig& c) {
  return static_cast<std::int64_t>(static_cast<double>(c.head_dim) * c.partial_rotary_factor);
}

Result<TargetConfig> ParseTargetConfig(const json& root, const std::string& file) {
  if (!root.is_object()) return InvalidArgument(file + ": not a JSON object");
  TargetConfig c;
  const json* cfg = &root;
  std::string where = file;
  if (Has(root, "text_config")) {
    if (!root.at("text_config").is_object()) return InvalidArgument(file + ": field \"text_config\" is not an object");
    cfg = &root.at("text_config");
    where = file + ".text_config";
    c.weight_prefix = "model.language_model.";
  } else {
    c.weight_prefix = "model.";
  }
  if (Has(*cfg, "model_type")) {
    DFLASH_ASSIGN_OR_RETURN(c.model_type, GetString(*cfg, "model_type", where));
  } else {
    DFLASH_ASSIGN_OR_RETURN(c.model_type, GetString(root, "model_type", file));
  }
  if (c.model_type == "qwen3_5" || c.model_type == "qwen3_5_text") {
    c.arch = TargetArch::kQwen3_5Hybrid;
  } else if (c.model_type == "qwen3") {
    c.arch = TargetArch::kQwen3Dense;
  } else {
    return Unsupported(where + ": model_type \"" + c.model_type +
                       "\" is not a supported target (qwen3_5 / qwen3_5_text hybrid or qwen3 dense)");
  }
  const json& j = *cfg;
  const bool hybrid = c.arch == TargetArch::kQwen3_5Hybrid;
  DFLASH_ASSIGN_OR_RETURN(c.hidden_size, GetPositiveInt(j, "hidden_size", where));
  DFLASH_ASSIGN_OR_RETURN(c.intermediate_size, GetPositiveInt(j, "intermediate_size", where));
  DFLASH_ASSIGN_OR_RETURN(c.num_hidden_layers, GetPositiveInt(j, "num_hidden_layers", where));
  DFLASH_ASSIGN_OR_RETURN(c.vocab_size, GetPositiveInt(j, "vocab_size", where));
  DFLASH_RETURN_IF_ERROR(ParseAttentionShape(j, where, c, /*default_head_dim=*/hybrid ? 256 : 0));
  if (Has(j, "max_position_embeddings")) {
    DFLASH_ASSIGN_OR_RETURN(c.max_position_embeddings, GetPositiveInt(j, "max_position_embeddings", where));
  }  // else the struct's 32768, transformers' default
  DFLASH_ASSIGN_OR_RETURN(c.rms_norm_eps, GetNumber(j, "rms_norm_eps", where));
  // tie_word_embeddings may sit on the outer (multimodal) config.
  bool tie_outer = false;
  DFLASH_ASSIGN_OR_RETURN(tie_outer, GetBoolOr(root, "tie_word_embeddings", false, file));
  DFLASH_ASSIGN_OR_RETURN(c.tie_word_embeddings, GetBoolOr(j, "tie_word_embeddings", tie_outer, where));
  DFLASH_ASSIGN_OR_RETURN(c.rope_theta, GetRopeField(j, "rope_theta", std::nullopt, where));
  DFLASH_ASSIGN_OR_RETURN(c.partial_rotary_factor,
                          GetRopeField(j, "partial_rotary_factor", hybrid ? 0.25 : 1.0, where));
  if (!(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1)) {
    return InvalidArgument(where + ": partial_rotary_factor must be in (0, 1], got " +
                           std::to_string(c.partial_rotary_factor));
  }
  DFLASH_ASSIGN_OR_RETURN(c.attention_bias, GetBoolOr(j, "attention_bias", false, where));

  if (c.arch == TargetArch::kQwen3Dense) {
    if (Has(j, "layer_types")) {
      DFLASH_ASSIGN_OR_RETURN(auto types, GetStringList(j, "layer_types", where));
      for (const auto& t : types) {
        if (t != "full_attention") {
          return Unsupported(where + ": layer_types holds \"" + t + "\"; only full_attention dense targets are supported");
        }
      }
    }
    c.layer_kinds.assign(c.num_hidden_layers, TargetLayerKind::kFullAttention);
    return c;
  }

  // transformers' Qwen3.5 attention always gates and ignores this key: a false would be misread there silently.
  DFLASH_ASSIGN_OR_RETURN(c.attn_output_gate, GetBoolOr(j, "attn_output_gate", true, where));
  if (!c.attn_output_gate) {
    return Unsupported(where + ": \"attn_output_gate\": false; the Qwen3.5 architecture (as transformers implements "
                       "it) always gates the attention output, so such a model cannot be represented");
  }
  DFLASH_ASSIGN_OR_RETURN(c.linear_num_key_heads, GetPositiveInt(j, "linear_num_key_heads", where));
  DFLASH_ASSIGN_OR_RETURN(c.linear_num_value_heads, GetPositiveInt(j, "linear_num_value_heads", where));
  DFLASH_ASSIGN_OR_RETURN(c.linear_key_head_dim, GetPositiveInt(j, "linear_key_head_dim", where));
  DFLASH_ASSIGN_OR_RETURN(c.linear_value_head_dim, GetPositiveInt(j, "linear_value_head_dim", where));
  DFLASH_ASSIGN_OR_RETURN(c.linear_conv_kernel_dim, GetPositiveInt(j, "linear_conv_kernel_dim", where));
  if (c.linear_num_value_heads % c.linear_num_key_heads != 0) {
    return InvalidArgument(where + ": linear_num_value_heads " + std::to_string(c.linear_num_value_heads) +
                           " is not a multiple of linear_num_key_heads " + std::to_string(c.linear_num_key_heads));
  }
  if (Has(j, "layer_types")) {
    DFLASH_ASSIGN_OR_RETURN(auto types, GetStringList(j, "layer_types", where));
    if (static_cast<std::int64_t>(types.size()) != c.num_hidden_layers) {
      return InvalidArgument(where + ": layer_types has " + std::to_string(types.size()) + " entries but " +
                             "num_hidden_layers is " + std::to_string(c.num_hidden_layers));
    }
    for (std::size_t i = 0; i < types.size(); ++i) {
      if (types[i] == "full_attention") {
        c.layer_kinds.push_back(TargetLayerKind::kFullAttention);
      } else if (types[i] == "linear_attention") {
        c.layer_kinds.push_back(TargetLayerKind::kLinearAttention);
      } else {
        return InvalidArgument(where + ": layer_types[" + std::to_string(i) + "] is \"" + types[i] +
                               "\", expected \"full_attention\" or \"linear_attention\"");
      }
    }
    DFLASH_ASSIGN_OR_RETURN(c.full_attention_interval, GetIntOr(j, "full_attention_interval", 0, where));
  } else {
    DFLASH_ASSIGN_OR_RETURN(c.full_attention_interval, GetPositiveInt(j, "full_attention_interval", where));
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
      c.layer_kinds.push_back((i + 1) % c.full_attention_interval == 0 ? TargetLayerKind::kFullAttention
                                                                       : TargetLayerKind::kLinearAttention);
    }
  }
  return c;
}

Result<DrafterConfig> ParseDrafterConfig(const json& j, const std::string& where) {
  if (!j.is_object()) return InvalidArgument(where + ": not a JSON object");
  DrafterConfig c;
  DFLASH_ASSIGN_OR_RETURN(c.hidden_size, GetPositiveInt(j, "hidden_size", where));
  DFLASH_ASSIGN_OR_RETURN(c.intermediate_size, GetPositiveInt(j, "intermediate_size", where));
  DFLASH_ASSIGN_OR_RETURN(c.num_hidden_layers, GetPositiveInt(j, "num_hidden_layers", where));
  DFLASH_RETURN_IF_ERROR(ParseAttentionShape(j, where, c));
  DFLASH_ASSIGN_OR_RETURN(c.vocab_size, GetIntOr(j, "vocab_size", 0, where));
  DFLASH_ASSIGN_OR_RETURN(c.rms_norm_eps, GetNumber(j, "rms_norm_eps", where));
  DFLASH_ASSIGN_OR_RETURN(c.rope_theta, GetRopeField(j, "rope_theta", std::nullopt, where));
  if (Has(j, "max_position_embeddings")) {
    DFLASH_ASSIGN_OR_RETURN(c.max_position_embeddings, GetPositiveInt(j, "max_position_embeddings", where));
  }  // else the struct's 32768, transformers' default

  // DFlash fields: top level or under "dflash_config" (public drafters use both).
  const json empty = json::object();
  const json* sub = &empty;
  const std::string sub_where = where + ".dflash_config";
  if (Has(j, "dflash_config")) {
    if (!j.at("dflash_config").is_object()) return InvalidArgument(where + ": field \"dflash_config\" is not an object");
    sub = &j.at("dflash_config");
  }
  auto pick = [&](const std::string& key) -> std::pair<const json*, std::string> {
    if (Has(*sub, key)) return {sub, sub_where};
    if (Has(j, key)) return {&j, where};
    return {nullptr, where};
  };
  for (const char* key : {"block_size", "mask_token_id"}) {
    auto [obj, w] = pick(key);
    if (!obj) return InvalidArgument(where + ": field \"" + key + "\" is missing (looked at top level and in dflash_config)");
    DFLASH_ASSIGN_OR_RETURN(std::int64_t v, GetInt(*obj, key, w));
    if (v < 0 || (v == 0 && std::string(key) == "block_size")) {
      return InvalidArgument(w + ": field \"" + key + "\" must be " +
                             (std::string(key) == "block_size" ? "positive" : "non-negative") + ", got " +
                             std::to_string(v));
    }
    (std::string(key) == "block_size" ? c.block_size : c.mask_token_id) = v;
  }
  if (c.vocab_size > 0 && c.mask_token_id >= c.vocab_size) {
    return InvalidArgument(where + ": mask_token_id " + std::to_string(c.mask_token_id) + " is outside the vocabulary (" +
                           std::to_string(c.vocab_size) + ")");
  }
  if (auto [obj, w] = pick("num_target_layers"); obj) {
    DFLASH_ASSIGN_OR_RETURN(std::int64_t v, GetPositiveInt(*obj, "num_target_layers", w));
    c.num_target_layers = v;
  }
  if (auto [obj, w] = pick("target_layer_ids"); obj) {
    const json& ids = obj->at("target_layer_ids");
    if (!ids.is_array() || ids.empty()) {
      return InvalidArgument(w + ": field \"target_layer_ids\" must be a non-empty list of layer indices");
    }
    for (const auto& id : ids) {
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0) {
        return InvalidArgument(w + ": target_layer_ids holds " + id.dump() + ", not a layer index");
      }
      const auto v = id.get<std::int64_t>();
      if (!c.target_layer_ids.empty() && v <= c.target_layer_ids.back()) {
        return InvalidArgument(w + ": target_layer_ids must be strictly increasing, got " + ids.dump());
      }
      if (c.num_target_layers && v >= *c.num_target_layers) {
        return InvalidArgument(w + ": target_layer_ids holds layer " + std::to_string(v) + " but num_target_layers is " +
                               std::to_string(*c.num_target_layers));
      }
      c.target_layer_ids.push_back(v);
    }
  }
  bool any_sliding = false;
  if (Has(j, "layer_types")) {
    DFLASH_ASSIGN_OR_RETURN(auto types, GetStringList(j, "layer_types", where));
    if (static_cast<std::int64_t>(types.size()) != c.num_hidden_layers) {
      return InvalidArgument(where + ": layer_types has " + std::to_string(types.size()) +
                             " entries but num_hidden_layers is " + std::to_string(c.num_hidden_layers));
    }
    for (std::size_t i = 0; i < types.size(); ++i) {
      if (types[i] == "full_attention") {
        c.layer_kinds.push_back(DrafterLayerKind::kFullAttention);
      } else if (types[i] == "sliding_attention") {
        c.layer_kinds.push_back(DrafterLayerKind::kSlidingAttention);
        any_sliding = true;
      } else {
        return InvalidArgument(where + ": layer_types[" + std::to_string(i) + "] is \"" + types[i] +
                               "\", expected \"full_attention\" or \"sliding_attention\"");
      }
    }
  } else {
    c.layer_kinds.assign(c.num_hidden_layers, DrafterLayerKind::kFullAttention);
  }
  if (auto [obj, w] = pick("sliding_window"); obj) {
    DFLASH_ASSIGN_OR_RETURN(std::int64_t v, GetPositiveInt(*obj, "sliding_window", w));
    c.sliding_window = v;
  }
  if (any_sliding && !c.sliding_window) {
    return InvalidArgument(where + ": layer_types has sliding_attention layers but \"sliding_window\" is missing");
  }
  return c;
}

Result<TargetConfig> LoadTargetConfig(const std::filesystem::path& path) {
  std::string where;
  DFLASH_ASSIGN_OR_RETURN(json j, ReadConfigJson(path, &where));
  return ParseTargetConfig(j, where);
}

Result<DrafterConfig> LoadDrafterConfig(const std::filesystem::path& path) {
  std::string where;
  DFLASH_ASSIGN_OR_RETURN(json j, ReadConfigJson(path, &where));
  return ParseDrafterConfig(j, where);
}

}  // namespace dflash::setup
