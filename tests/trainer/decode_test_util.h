// Shared by the decoding tests (target decoder, speculative decoding, synthetic data): small target and drafter
// configs, random models on the CPU in fp32, and the target's reference forward.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "setup/presets.h"
#include "trainer/models/target_model.h"
#include "trainer/ops/reference_ops.h"

namespace dflash::trainer::testing {

// Decoding runs many small ops: on a shared 2-core machine, OpenMP's spinning worker threads make them ~30x slower
// than one thread does (measured), so these test binaries run LibTorch single-threaded.
inline const bool kSingleThreaded = [] {
  torch::set_num_threads(1);
  return true;
}();

// The tiny preset's hybrid target (setup/presets/tiny.target.json: hidden 256, 8 layers: 6 gated delta net (2 key
// heads, 4 value heads) + 2 full attention, vocab 1024).
inline setup::TargetConfig TinyHybridConfig() {
  auto preset = setup::Preset("tiny");
  EXPECT_TRUE(preset.ok()) << preset.status().ToString();
  return preset->target;
}

// A small plain Qwen3 dense target (standard norms, full RoPE, no output gate).
inline setup::TargetConfig SmallDenseConfig() {
  const nlohmann::json j = {{"model_type", "qwen3"},        {"hidden_size", 96},       {"intermediate_size", 192},
                            {"num_hidden_layers", 5},       {"num_attention_heads", 6}, {"num_key_value_heads", 2},
                            {"head_dim", 16},               {"vocab_size", 300},       {"rms_norm_eps", 1e-6},
                            {"rope_theta", 1000000.0},      {"tie_word_embeddings", true}, {"attention_bias", true}};
  auto c = setup::ParseTargetConfig(j);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

// A full fp32 CPU target with random weights; init_std above the preset's 0.02 so every layer matters.
inline std::unique_ptr<TargetModel> RandomTarget(const setup::TargetConfig& config, std::vector<std::int64_t> taps,
                                                 std::uint64_t seed, double init_std = 0.05) {
  TargetLoadOptions o;
  o.device = torch::kCPU;
  o.dtype = torch::kFloat;
  o.full = true;
  o.taps = std::move(taps);
  return TargetModel::RandomInit(config, o, seed, init_std);
}

inline torch::Tensor RandomTokens(std::int64_t n, std::int64_t vocab, std::uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(vocab, {n}, torch::kLong);
}

}  // namespace dflash::trainer::testing
