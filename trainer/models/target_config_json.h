// A TargetConfig written back as a Hugging Face config.json that LoadTargetConfig parses into an equal config:
// the Qwen3.5 hybrid in the multimodal form (model_type qwen3_5, the text model under "text_config", weights under
// "model.language_model.") when its weight_prefix says so, else at top level (qwen3_5_text); Qwen3 dense at top
// level. RoPE fields go under "rope_parameters" for the hybrid (as current transformers writes them), at top level
// for dense. Who may call: TargetModel::SaveHf, presets and tests. Thread-safety: pure functions; the file write is
// atomic (base/atomic_file.h).
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "setup/model_config.h"

namespace dflash::trainer {

nlohmann::json TargetConfigJson(const setup::TargetConfig& config);

// Writes TargetConfigJson(config), indented, to `path` atomically.
Status WriteTargetConfig(const std::filesystem::path& path, const setup::TargetConfig& config);

}  // namespace dflash::trainer
