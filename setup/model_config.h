// Model configs read from Hugging Face config.json files: the frozen target (Qwen3.5/3.6 hybrid text model, top-level
// or nested under "text_config" as multimodal checkpoints store it, or a plain Qwen3 dense model) and the DFlash
// drafter (spec §3: layer_types / sliding_window, block_size, mask_token_id, target_layer_ids when present, at top
// level or under "dflash_config"). Also the tapped-layer rule of spec §2.
// Every missing or mistyped field is an InvalidArgument naming the file (or "config") and the field; an unknown
// model_type is Unsupported. Optional fields default as transformers (5.x) defaults them for the model_type
// (Qwen3.5: partial_rotary_factor 0.25, head_dim 256; both: max_position_embeddings 32768), so a config reads as
// transformers reads it; what transformers' model cannot represent is Unsupported (a Qwen3.5 "attn_output_gate":
// false: its attention always gates). Who may call: the trainer's loaders, the training setups (training_setup.h,
// presets.h), tests. Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace dflash::setup {

enum class TargetArch { kQwen3_5Hybrid, kQwen3Dense };
// Layer kinds of the target: gated delta net ("linear_attention") or (gated) full attention.
enum class TargetLayerKind { kLinearAttention, kFullAttention };
// Layer kinds of the drafter.
enum class DrafterLayerKind { kSlidingAttention, kFullAttention };

struct TargetConfig {
  TargetArch arch = TargetArch::kQwen3Dense;
  std::string model_type;      // of the text model: "qwen3_5_text", "qwen3"
  std::string weight_prefix;   // "model.language_model." (multimodal, nested text_config) or "model."
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t vocab_size = 0;
  bool tie_word_embeddings = false;
  double rms_norm_eps = 1e-6;
  std::int64_t max_position_embeddings = 32768;  // not used by the model (plain RoPE); kept for the saved config
  // Full attention.
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;
  double rope_theta = 0;
  double partial_rotary_factor = 1.0;
  bool attention_bias = false;
  bool attn_output_gate = false;  // q_proj also produces a per-head sigmoid gate: always for Qwen3.5, never for Qwen3
  // Gated delta net (Qwen3.5 only; 0 for dense).
  std::int64_t full_attention_interval = 0;
  std::int64_t linear_num_key_heads = 0;
  std::int64_t linear_num_value_heads = 0;
  std::int64_t linear_key_head_dim = 0;
  std::int64_t linear_value_head_dim = 0;
  std::int64_t linear_conv_kernel_dim = 0;
  std::vector<TargetLayerKind> layer_kinds;  // one per layer
};

struct DrafterConfig {
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t vocab_size = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 0;
  std::int64_t max_position_embeddings = 32768;  // as for the target: kept for the saved config
  std::int64_t block_size = 0;
  std::int64_t mask_token_id = 0;
  std::optional<std::int64_t> num_target_layers;
  std::vector<std::int64_t> target_layer_ids;  // empty: derive with TappedLayers
  std::vector<DrafterLayerKind> layer_kinds;    // one per layer; all full when the config has no layer_types
  std::optional<std::int64_t> sliding_window;   // required when any layer is sliding
};

// Spec §2: round(1 + i·(L−4)/(n−1)) for i = 0..n−1, rounding halves to even as the reference (Python) does;
// n == 1 gives [L / 2] as the reference does. InvalidArgument for L < 5 or n < 1.
Result<std::vector<std::int64_t>> TappedLayers(std::int64_t num_target_layers, std::int64_t num_drafter_layers);
// The drafter's target_layer_ids when its config has them (checked against the target), else TappedLayers.
Result<std::vector<std::int64_t>> ResolveTappedLayers(const DrafterConfig& drafter, const TargetConfig& target);

// The rotated leading dims of each full-attention head: int(head_dim * partial_rotary_factor), as HF computes it.
std::int64_t TargetRotaryDim(const TargetConfig& config);

Result<TargetConfig> ParseTargetConfig(const nlohmann::json& config, const std::string& where = "config");
Result<DrafterConfig> ParseDrafterConfig(const nlohmann::json& config, const std::string& where = "config");
// `path` is a config.json or a model folder holding one.
Result<TargetConfig> LoadTargetConfig(const std::filesystem::path& path);
Result<DrafterConfig> LoadDrafterConfig(const std::filesystem::path& path);

}  // namespace dflash::setup
