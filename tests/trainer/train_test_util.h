// A small training setup for the trainer's tests: a 5-layer Qwen3.5-architecture target saved in the HF layout, a
// 2-layer drafter config and a JSONL dataset with a learnable rule, all in one folder.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include <gtest/gtest.h>

#include "setup/model_config.h"
#include "trainer/models/target_model.h"
#include "trainer/train/train_options.h"

namespace dflash::trainer::testing {

constexpr std::int64_t kVocab = 64;

inline nlohmann::json TargetJson() {
  return {{"model_type", "qwen3_5_text"}, {"hidden_size", 32},          {"intermediate_size", 64},
          {"num_hidden_layers", 5},       {"full_attention_interval", 4}, {"num_attention_heads", 2},
          {"num_key_value_heads", 1},     {"head_dim", 16},             {"linear_num_key_heads", 1},
          {"linear_num_value_heads", 2},  {"linear_key_head_dim", 16},  {"linear_value_head_dim", 16},
          {"linear_conv_kernel_dim", 4},  {"vocab_size", kVocab},       {"rms_norm_eps", 1e-6},
          {"rope_theta", 10000.0},        {"partial_rotary_factor", 0.25}};
}

inline nlohmann::json DrafterJson() {
  return {{"hidden_size", 32},        {"intermediate_size", 64}, {"num_hidden_layers", 2},
          {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"head_dim", 16},
          {"vocab_size", kVocab},     {"rms_norm_eps", 1e-6},     {"rope_theta", 10000.0},
          {"block_size", 8},          {"mask_token_id", kVocab - 1},
          {"layer_types", {"sliding_attention", "full_attention"}}, {"sliding_window", 16}};
}

// Writes target/, drafter.json and data.jsonl (24 samples of 48 tokens: 4 random prompt tokens, then
// x[t+1] = (5 x[t] + 3) mod 61 with loss_mask 1) under `root`.
inline void WriteSmallTrainingSetup(const std::filesystem::path& root) {
  auto config = setup::ParseTargetConfig(TargetJson(), "test target");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  TargetLoadOptions options;
  options.dtype = torch::kFloat;
  options.taps = {1, 2};
  auto target = TargetModel::RandomInit(*config, options, /*seed=*/3, /*init_std=*/0.2);
  ASSERT_TRUE(target->SaveHf(root / "target").ok());
  std::ofstream(root / "drafter.json") << DrafterJson().dump();
  std::mt19937 rng(11);
  std::ofstream data(root / "data.jsonl");
  for (int s = 0; s < 24; ++s) {
    nlohmann::json ids = nlohmann::json::array(), mask = nlohmann::json::array();
    int x = 0;
    for (int t = 0; t < 48; ++t) {
      x = t < 4 ? int(rng() % 61) : (5 * x + 3) % 61;
      ids.push_back(x);
      mask.push_back(t < 4 ? 0 : 1);
    }
    data << nlohmann::json{{"input_ids", ids}, {"loss_mask", mask}}.dump() << "\n";
  }
}

// The options of a short CPU run of that setup into root/run (tests set what they vary).
inline TrainOptions SmallRunOptions(const std::filesystem::path& root, const std::string& run) {
  TrainOptions o;
  o.target_dir = root / "target";
  o.drafter_config = root / "drafter.json";
  o.data = root / "data.jsonl";
  o.output_dir = root / run;
  o.max_length = 48;
  o.num_anchors = 6;
  o.batch_size = 2;
  o.device = "cpu";
  o.lr = 3e-3;
  o.log_every = 0;
  return o;
}

}  // namespace dflash::trainer::testing
