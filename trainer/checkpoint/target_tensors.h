// The tensors the trainer reads from the target checkpoint: the embedding, every weight of decoder layers
// 0..last_layer (both layer kinds of spec §1, HF names under the config's weight_prefix), and lm_head (absent when
// embeddings are tied). Layers after the last tap and the final norm are never run, so never listed: a loader passes
// this list to Checkpoint::CheckTensors before reading anything and then reads only these.
// Shapes follow HF's parameter layout ([out, in] for linears, [channels, 1, kernel] for the depthwise conv1d).
// dtype is left open (the loader converts to bf16). Callers: the trainer's target loader and tests.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "trainer/checkpoint/checkpoint.h"
#include "setup/model_config.h"

namespace dflash::trainer {

// Weights of one decoder layer of the target.
std::vector<TensorSpec> TargetLayerTensors(const setup::TargetConfig& config, std::int64_t layer);
// Everything needed to run layers 0..last_layer and use the embedding and lm_head. InvalidArgument when last_layer is
// outside [0, num_hidden_layers).
Result<std::vector<TensorSpec>> TargetTensorsNeeded(const setup::TargetConfig& config, std::int64_t last_layer);
// The name of the embedding and of the output head ("lm_head.weight", or the embedding when tied).
std::string TargetEmbeddingName(const setup::TargetConfig& config);
std::string TargetLmHeadName(const setup::TargetConfig& config);

}  // namespace dflash::trainer
