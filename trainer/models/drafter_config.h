// The drafter's config as the model needs it and as the public DFlash drafters store it.
//   ResolveDrafterConfig: a DrafterConfig (checkpoint/model_config.h) made ready to build a Drafter: layer_kinds
//     filled (all full attention) when empty, target_layer_ids derived from num_target_layers (spec §2) when empty,
//     and every shape rule checked (heads divide, even head_dim, block_size >= 2, a sliding_window for sliding layers).
//   DrafterConfigJson: config.json in the layout z-lab's DFlashDraftModel checkpoints use: a Qwen3 config
//     (model_type "qwen3", architectures ["DFlashDraftModel"], auto_map to dflash.DFlashDraftModel, layer_types,
//     sliding_window / use_sliding_window, rope_theta and rope_parameters, max_position_embeddings, "dtype" and
//     "torch_dtype" of the saved weights) plus block_size at top level and
//     "dflash_config": {block_size, mask_token_id, target_layer_ids}; ParseDrafterConfig reads it back unchanged.
// Who may call: the Drafter and tests. Thread-safety: pure functions.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "setup/model_config.h"

namespace dflash::trainer {

// InvalidArgument naming the field for an inconsistent config, or when neither target_layer_ids nor
// num_target_layers is known (the feature width would be unknown).
Result<setup::DrafterConfig> ResolveDrafterConfig(const setup::DrafterConfig& config);

// `dtype` is the dtype of the saved weights ("dtype": "bfloat16" / "float16" / "float32").
nlohmann::ordered_json DrafterConfigJson(const setup::DrafterConfig& config, torch::Dtype dtype);

}  // namespace dflash::trainer
