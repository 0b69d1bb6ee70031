// The weights a TargetModel holds: which tensors (checkpoint/target_tensors.h's list for the layers it runs, plus the
// final norm when it runs them all), the dtype each is kept in (the activation dtype, except the delta net's A_log
// and dt_bias, kept in fp32 as the gate math needs), and their random initialisation for the tiny preset and tests:
//   linear / embedding / lm_head / conv1d weights normal(0, init_std); biases 0; RMSNorm weights at their neutral
//   value (0 for Qwen3.5's zero-centred norms, 1 for standard ones and the delta net's gated norm);
//   A_log = log(uniform(1, 16)); dt_bias = 1 (HF's init).
// Each tensor draws from its own generator seeded by (seed, name), so a tensor's values do not depend on which other
// tensors are created (a features-only model and a full one of the same seed agree).
// Who may call: target_model.cc, target_decoder.cc and tests. Thread-safety: pure functions.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "trainer/checkpoint/checkpoint.h"
#include "setup/model_config.h"
#include "trainer/models/target_layers.h"

namespace dflash::trainer {

// Name of the final norm ("<prefix>norm.weight").
std::string TargetFinalNormName(const setup::TargetConfig& config);

// Every tensor needed to run layers 0..last_layer, with the final norm when `with_final_norm`.
Result<std::vector<TensorSpec>> TargetModelTensors(const setup::TargetConfig& config, std::int64_t last_layer,
                                                   bool with_final_norm);

// The dtype tensor `name` is kept in when activations are `activation_dtype`.
torch::Dtype TargetStorageDtype(const std::string& name, torch::Dtype activation_dtype);

// Random values for every spec (see above), in TargetStorageDtype on `device`.
TargetWeights RandomTargetWeights(const setup::TargetConfig& config, const std::vector<TensorSpec>& specs,
                                  std::uint64_t seed, double init_std, torch::Dtype dtype, torch::Device device);

}  // namespace dflash::trainer
