// A TargetConfig written back as a Hugging Face config.json that LoadTargetConfig parses into an equal config:
// the Qwen3.5 hybrid in the multimodal form (model_type qwen3_5, the text model under "text_config", weights under
// "model.language_model.") when its weight_prefix says so, else at top level (qwen3_5_text); Qwen3 dense at top
// level. RoPE fields go under "rope_parameters" for the hybrid (as current transformers writes them), at top level
// for dense. Only keys transformers reads are written: "dtype" (transformers >= 4.56) and "torch_dtype" (older
// readers; transformers 5 takes it without a warning) name the saved weights' dtype, max_position_embeddings is
// written, and no "attn_output_gate" (transformers' Qwen3.5 ignores it: it always gates).
// Who may call: TargetModel::SaveHf, presets and tests. Thread-safety: pure functions; the file write is atomic
// (base/atomic_file.h).
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "setup/model_config.h"

namespace dflash::trainer {

// The config.json name of a weight dtype: "bfloat16", "float16", "float32" (else LibTorch's name).
std::string HfDtypeName(torch::Dtype dtype);

// `dtype`: the dtype of the saved weights.
nlohmann::json TargetConfigJson(const setup::TargetConfig& config, torch::Dtype dtype);

// Writes TargetConfigJson(config, dtype), indented, to `path` atomically.
Status WriteTargetConfig(const std::filesystem::path& path, const setup::TargetConfig& config, torch::Dtype dtype);

}  // namespace dflash::trainer
