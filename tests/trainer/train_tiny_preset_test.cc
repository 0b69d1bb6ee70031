// trainer/train/tiny_preset: the preset exercises every path it stands in for: its target groups several value
// heads per gated-delta-net key head (HV/H > 1, so the grouping is tested: permuting the key heads changes the
// features), every one of its layers changes its greedy continuation (the embedding does not dominate the residual
// stream), the drafter's sliding window is shorter than the sequences it trains and decodes on, and its rows are
// packed (several documents a row).
#include "trainer/train/tiny_preset.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "decode_test_util.h"
#include "setup/presets.h"
#include "trainer/train/spec_decode.h"

namespace dflash::trainer {
namespace {

TEST(TinyPreset, ShapesExerciseKeyHeadGroupingTheSlidingWindowAndPackedRows) {
  auto preset = setup::Preset("tiny");
  ASSERT_TRUE(preset.ok()) << preset.status().ToString();
  const setup::TargetConfig& t = preset->target;
  EXPECT_GE(t.linear_num_key_heads, 2);
  EXPECT_GT(t.linear_num_value_heads / t.linear_num_key_heads, 1);
  const TinyPresetSize size;
  const std::int64_t sample = size.prompt_tokens + size.continuation_tokens;
  ASSERT_TRUE(preset->drafter && preset->drafter->sliding_window);
  EXPECT_LT(*preset->drafter->sliding_window, size.prompt_tokens + 96);  // eval: 96 new tokens after the prompt
  EXPECT_LT(*preset->drafter->sliding_window, sample);
  const TrainOptions o = TinyPresetOptions("p", "r");
  EXPECT_EQ(o.row_mode, data::RowMode::kPack);
  EXPECT_GE(o.max_length, 2 * sample);
}

std::vector<std::vector<std::int64_t>> Prompts(std::int64_t vocab) {
  std::vector<std::vector<std::int64_t>> out;
  for (std::uint64_t seed : {11, 12}) {
    const auto t = testing::RandomTokens(32, vocab, seed);
    out.emplace_back(t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + t.numel());
  }
  return out;
}

std::vector<std::vector<std::int64_t>> Greedy(const TargetModel& target,
                                              const std::vector<std::vector<std::int64_t>>& prompts) {
  std::vector<std::vector<std::int64_t>> out;
  for (const auto& p : prompts) {
    auto g = GreedyDecode(target, p, 24);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    out.push_back(g.ok() ? g->tokens : std::vector<std::int64_t>{});
  }
  return out;
}

TEST(TinyPreset, EveryTargetLayerChangesTheGreedyContinuation) {
  const TinyPresetSize size;
  auto target = TinyPresetTarget(size);
  const setup::TargetConfig& c = target->config();
  const auto prompts = Prompts(c.vocab_size);
  const auto want = Greedy(*target, prompts);
  for (std::int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    // The layer's two residual updates zeroed: the model without that layer.
    auto weights = target->weights();
    const std::string p = c.weight_prefix + "layers." + std::to_string(layer) + ".";
    const bool full = c.layer_kinds[layer] == setup::TargetLayerKind::kFullAttention;
    for (const std::string& name : {p + (full ? "self_attn.o_proj.weight" : "linear_attn.out_proj.weight"),
                                    p + "mlp.down_proj.weight"}) {
      ASSERT_TRUE(weights.count(name)) << name;
      weights[name] = torch::zeros_like(weights.at(name));
    }
    auto without = TargetModel::FromWeights(c, target->options(), weights);
    ASSERT_TRUE(without.ok()) << without.status().ToString();
    EXPECT_NE(Greedy(**without, prompts), want) << "layer " << layer << " does not change the greedy tokens";
  }
}

TEST(TinyPreset, PermutingTheKeyHeadsChangesTheFeatures) {
  const TinyPresetSize size;
  auto target = TinyPresetTarget(size);
  const setup::TargetConfig& c = target->config();
  ASSERT_GE(c.linear_num_key_heads, 2);
  // Layer 0 (gated delta net): swap key heads 0 and 1 in both q and k (rows of in_proj_qkv and the conv1d
  // channels, layout [q | k | v]). Value heads keep their place, so with grouping they now read other keys.
  ASSERT_EQ(c.layer_kinds[0], setup::TargetLayerKind::kLinearAttention);
  auto weights = target->weights();
  const std::int64_t dk = c.linear_key_head_dim, key_dim = c.linear_num_key_heads * dk;
  for (const char* tensor : {"linear_attn.in_proj_qkv.weight", "linear_attn.conv1d.weight"}) {
    const std::string name = c.weight_prefix + "layers.0." + tensor;
    auto w = weights.at(name).clone();
    for (std::int64_t base : {std::int64_t{0}, key_dim}) {
      auto head0 = w.narrow(0, base, dk).clone();
      w.narrow(0, base, dk).copy_(w.narrow(0, base + dk, dk));
      w.narrow(0, base + dk, dk).copy_(head0);
    }
    weights[name] = w;
  }
  auto permuted = TargetModel::FromWeights(c, target->options(), weights);
  ASSERT_TRUE(permuted.ok()) << permuted.status().ToString();
  auto ops = MakeReferenceOps();
  const auto ids = testing::RandomTokens(64, c.vocab_size, 5);
  const auto a = target->Features(ids, {}, *ops), b = (*permuted)->Features(ids, {}, *ops);
  EXPECT_GT((a - b).abs().max().item<double>(), 1e-2 * a.abs().max().item<double>());
}

}  // namespace
}  // namespace dflash::trainer
