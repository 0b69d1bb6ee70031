// The list of target tensors the trainer needs: exactly embed + layers 0..last tap + lm_head, with HF names and
// shapes of both layer kinds; and a generated checkpoint with those names passes CheckTensors.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "tests/trainer/checkpoint_test_util.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/safetensors_writer.h"
#include "trainer/checkpoint/target_tensors.h"

namespace dflash::trainer {
namespace {

using json = nlohmann::json;

setup::TargetConfig Qwen36_27B() {
  json j = json::parse(R"({"model_type": "qwen3_5", "text_config": {
    "model_type": "qwen3_5_text", "hidden_size": 5120, "intermediate_size": 17408, "num_hidden_layers": 64,
    "vocab_size": 248320, "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256,
    "rms_norm_eps": 1e-6, "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 48,
    "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    "rope_parameters": {"rope_theta": 10000000, "partial_rotary_factor": 0.25}}})");
  return *setup::ParseTargetConfig(j);
}

setup::TargetConfig Qwen3_8B() {
  json j = json::parse(R"({"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
    "num_hidden_layers": 36, "vocab_size": 151936, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000})");
  return *setup::ParseTargetConfig(j);
}

std::map<std::string, std::vector<std::int64_t>> AsMap(const std::vector<TensorSpec>& specs) {
  std::map<std::string, std::vector<std::int64_t>> m;
  for (const auto& s : specs) EXPECT_TRUE(m.emplace(s.name, s.shape).second) << "listed twice: " << s.name;
  return m;
}

TEST(TargetTensors, Qwen36ListHoldsExactlyTheLayersUpToTheLastTap) {
  const setup::TargetConfig c = Qwen36_27B();
  auto specs = TargetTensorsNeeded(c, 61);
  ASSERT_TRUE(specs.ok()) << specs.status().ToString();
  const auto m = AsMap(*specs);
  // 62 layers (0..61): full attention at 3, 7, ..., 59, gated delta net elsewhere; 11 and 14 weights each.
  int full = 0, linear = 0;
  for (int i = 0; i <= 61; ++i) ((i + 1) % 4 == 0 ? full : linear)++;
  EXPECT_EQ(m.size(), 2u + full * 11u + linear * 14u);
  std::set<std::int64_t> layers;
  const std::string prefix = "model.language_model.layers.";
  for (const auto& [name, shape] : m) {
    if (name.rfind(prefix, 0) == 0) layers.insert(std::stoll(name.substr(prefix.size())));
  }
  EXPECT_EQ(layers.size(), 62u);
  EXPECT_EQ(*layers.begin(), 0);
  EXPECT_EQ(*layers.rbegin(), 61);
  EXPECT_FALSE(m.count("model.language_model.norm.weight"));  // features are taken before the final norm
  EXPECT_EQ(m.at("model.language_model.embed_tokens.weight"), (std::vector<std::int64_t>{248320, 5120}));
  EXPECT_EQ(m.at("lm_head.weight"), (std::vector<std::int64_t>{248320, 5120}));
}

TEST(TargetTensors, Qwen36LayerShapesFollowSpecSection1) {
  const setup::TargetConfig c = Qwen36_27B();
  const auto gdn = AsMap(TargetLayerTensors(c, 0));
  const std::string g = "model.language_model.layers.0.linear_attn.";
  EXPECT_EQ(gdn.size(), 14u);
  EXPECT_EQ(gdn.at(g + "in_proj_qkv.weight"), (std::vector<std::int64_t>{10240, 5120}));
  EXPECT_EQ(gdn.at(g + "in_proj_z.weight"), (std::vector<std::int64_t>{6144, 5120}));
  EXPECT_EQ(gdn.at(g + "in_proj_b.weight"), (std::vector<std::int64_t>{48, 5120}));
  EXPECT_EQ(gdn.at(g + "in_proj_a.weight"), (std::vector<std::int64_t>{48, 5120}));
  EXPECT_EQ(gdn.at(g + "conv1d.weight"), (std::vector<std::int64_t>{10240, 1, 4}));
  EXPECT_EQ(gdn.at(g + "A_log"), (std::vector<std::int64_t>{48}));
  EXPECT_EQ(gdn.at(g + "dt_bias"), (std::vector<std::int64_t>{48}));
  EXPECT_EQ(gdn.at(g + "norm.weight"), (std::vector<std::int64_t>{128}));
  EXPECT_EQ(gdn.at(g + "out_proj.weight"), (std::vector<std::int64_t>{5120, 6144}));
  EXPECT_EQ(gdn.at("model.language_model.layers.0.mlp.down_proj.weight"), (std::vector<std::int64_t>{5120, 17408}));

  const auto attn = AsMap(TargetLayerTensors(c, 3));
  const std::string a = "model.language_model.layers.3.self_attn.";
  EXPECT_EQ(attn.size(), 11u);
  EXPECT_EQ(attn.at(a + "q_proj.weight"), (std::vector<std::int64_t>{24 * 256 * 2, 5120}));
  EXPECT_EQ(attn.at(a + "k_proj.weight"), (std::vector<std::int64_t>{1024, 5120}));
  EXPECT_EQ(attn.at(a + "v_proj.weight"), (std::vector<std::int64_t>{1024, 5120}));
  EXPECT_EQ(attn.at(a + "o_proj.weight"), (std::vector<std::int64_t>{5120, 6144}));
  EXPECT_EQ(attn.at(a + "q_norm.weight"), (std::vector<std::int64_t>{256}));
  EXPECT_EQ(attn.at(a + "k_norm.weight"), (std::vector<std::int64_t>{256}));
  EXPECT_EQ(attn.at("model.language_model.layers.3.post_attention_layernorm.weight"),
            (std::vector<std::int64_t>{5120}));
}

TEST(TargetTensors, DenseQwen3ListAndTiedEmbeddings) {
  setup::TargetConfig c = Qwen3_8B();
  auto specs = TargetTensorsNeeded(c, 33);
  ASSERT_TRUE(specs.ok());
  const auto m = AsMap(*specs);
  EXPECT_EQ(m.size(), 2u + 34u * 11u);
  EXPECT_TRUE(m.count("model.layers.33.self_attn.q_proj.weight"));
  EXPECT_FALSE(m.count("model.layers.34.input_layernorm.weight"));
  EXPECT_EQ(m.at("model.layers.0.self_attn.q_proj.weight"), (std::vector<std::int64_t>{4096, 4096}));
  EXPECT_EQ(m.at("model.layers.0.self_attn.k_proj.weight"), (std::vector<std::int64_t>{1024, 4096}));
  EXPECT_EQ(m.at("model.layers.0.self_attn.q_norm.weight"), (std::vector<std::int64_t>{128}));

  c.tie_word_embeddings = true;
  const auto tied = AsMap(*TargetTensorsNeeded(c, 33));
  EXPECT_FALSE(tied.count("lm_head.weight"));
  EXPECT_EQ(TargetLmHeadName(c), "model.embed_tokens.weight");

  c.attention_bias = true;
  const auto biased = AsMap(TargetLayerTensors(c, 0));
  EXPECT_EQ(biased.at("model.layers.0.self_attn.k_proj.bias"), (std::vector<std::int64_t>{1024}));

  EXPECT_EQ(TargetTensorsNeeded(c, 36).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(TargetTensorsNeeded(c, -1).status().code(), ErrorCode::kInvalidArgument);
}

// A tiny hybrid target written as a sharded HF checkpoint: the needed list up to the last tap checks out, reads back,
// and a mis-shaped weight is reported by name and shape.
TEST(TargetTensors, GeneratedTinyHybridCheckpointPassesCheckAndReportsMisshape) {
  json j = json::parse(R"({"model_type": "qwen3_5", "text_config": {
    "model_type": "qwen3_5_text", "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 8,
    "vocab_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
    "rms_norm_eps": 1e-6, "full_attention_interval": 4, "linear_num_key_heads": 1, "linear_num_value_heads": 2,
    "linear_key_head_dim": 4, "linear_value_head_dim": 4, "linear_conv_kernel_dim": 4,
    "rope_parameters": {"rope_theta": 10000000, "partial_rotary_factor": 0.25}}})");
  const setup::TargetConfig c = *setup::ParseTargetConfig(j);
  const auto taps = *setup::TappedLayers(c.num_hidden_layers, 3);
  EXPECT_EQ(taps, (std::vector<std::int64_t>{1, 3, 5}));
  // The checkpoint holds every layer (and the final norm); the list stops at layer 5.
  auto all = *TargetTensorsNeeded(c, c.num_hidden_layers - 1);
  all.push_back({"model.language_model.norm.weight", {16}, std::nullopt});
  std::vector<std::vector<std::byte>> data;
  for (std::size_t i = 0; i < all.size(); ++i) data.push_back(testing::RandomBytes(*NumBytes(DType::kBF16, all[i].shape), i));

  testing::TempDir dir;
  json index;
  for (int shard = 0; shard < 2; ++shard) {
    const std::string file = "model-0000" + std::to_string(shard + 1) + "-of-00002.safetensors";
    std::vector<TensorToWrite> views;
    for (std::size_t i = shard; i < all.size(); i += 2) {
      views.push_back({all[i].name, DType::kBF16, all[i].shape, std::span(data[i])});
      index["weight_map"][all[i].name] = file;
    }
    ASSERT_TRUE(WriteSafetensors(dir.path() / file, views).ok());
  }
  testing::WriteFile(dir.path() / "model.safetensors.index.json", index.dump());
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();

  auto needed = *TargetTensorsNeeded(c, taps.back());
  EXPECT_LT(needed.size(), ckpt->Names().size());
  for (auto& s : needed) s.dtype = DType::kBF16;
  ASSERT_TRUE(ckpt->CheckTensors(needed).ok()) << ckpt->CheckTensors(needed).ToString();
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all[i].name == needed[3].name) {
      EXPECT_EQ(*ckpt->Read(needed[3].name), data[i]);
    }
  }

  // A config claiming a wider MLP no longer matches: the error names the tensor and both shapes.
  setup::TargetConfig wider = c;
  wider.intermediate_size = 32;
  Status st = ckpt->CheckTensors(*TargetTensorsNeeded(wider, taps.back()));
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tensor model.language_model.layers.0.mlp.gate_proj.weight has shape [24,16], "
                              "expected [32,16]"),
            std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace dflash::trainer
