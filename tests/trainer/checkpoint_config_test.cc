// HF config parsing of targets (Qwen3.6-27B-like nested hybrid, Qwen3-8B-like dense) and DFlash drafters, the
// tapped-layer rule, transformers' defaults for absent fields, what transformers cannot represent refused, and errors
// for missing or mistyped fields.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/trainer/checkpoint_test_util.h"
#include "setup/model_config.h"

namespace dflash::trainer {
namespace {

using json = nlohmann::json;
using testing::TempDir;
using testing::WriteFile;

json Qwen36_27BText() {
  return json::parse(R"({
    "model_type": "qwen3_5_text", "hidden_size": 5120, "intermediate_size": 17408, "num_hidden_layers": 64,
    "vocab_size": 248320, "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256,
    "rms_norm_eps": 1e-6, "full_attention_interval": 4, "attn_output_gate": true,
    "linear_num_key_heads": 16, "linear_num_value_heads": 48, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "tie_word_embeddings": false,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25}
  })");
}

json Qwen36_27B() {
  json j = {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
            {"model_type", "qwen3_5"},
            {"tie_word_embeddings", false},
            {"vision_config", {{"depth", 27}}}};
  j["text_config"] = Qwen36_27BText();
  return j;
}

json Qwen3_8B() {
  return json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
    "num_hidden_layers": 36, "vocab_size": 151936, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000, "attention_bias": false,
    "tie_word_embeddings": false, "use_sliding_window": false, "max_window_layers": 36
  })");
}

json Drafter27B() {
  return json::parse(R"({
    "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 5120, "intermediate_size": 17408,
    "num_hidden_layers": 5, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "rms_norm_eps": 1e-6, "rope_theta": 10000000, "vocab_size": 248320, "block_size": 16,
    "num_target_layers": 64, "sliding_window": 2048,
    "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
    "dflash_config": {"mask_token_id": 248070, "target_layer_ids": [1, 16, 31, 46, 61]}
  })");
}

TEST(TappedLayers, MatchTheSpecExamples) {
  EXPECT_EQ(*setup::TappedLayers(64, 5), (std::vector<std::int64_t>{1, 16, 31, 46, 61}));
  EXPECT_EQ(*setup::TappedLayers(36, 5), (std::vector<std::int64_t>{1, 9, 17, 25, 33}));
  // The 6-layer drafter of a 40-layer target: round(1 + i·36/5).
  EXPECT_EQ(*setup::TappedLayers(40, 6), (std::vector<std::int64_t>{1, 8, 15, 23, 30, 37}));
  // The published Qwen3.6-35B-A3B drafter's 8 taps of its 40-layer target.
  EXPECT_EQ(*setup::TappedLayers(40, 8), (std::vector<std::int64_t>{1, 6, 11, 16, 22, 27, 32, 37}));
}

TEST(TappedLayers, RoundHalvesToEvenLikeTheReference) {
  // L = 7, n = 3: 1 + i·3/2 = 1, 2.5, 4 -> Python's round gives 2 for 2.5.
  EXPECT_EQ(*setup::TappedLayers(7, 3), (std::vector<std::int64_t>{1, 2, 4}));
  // L = 9, n = 3: 1, 3.5, 6 -> 4.
  EXPECT_EQ(*setup::TappedLayers(9, 3), (std::vector<std::int64_t>{1, 4, 6}));
}

TEST(TappedLayers, EdgeCases) {
  EXPECT_EQ(*setup::TappedLayers(36, 1), (std::vector<std::int64_t>{18}));
  EXPECT_EQ(setup::TappedLayers(36, 0).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(setup::TappedLayers(4, 2).status().code(), ErrorCode::kInvalidArgument);
}

TEST(TargetConfig, Qwen36NestedTextConfigParses) {
  auto c = setup::ParseTargetConfig(Qwen36_27B());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, setup::TargetArch::kQwen3_5Hybrid);
  EXPECT_EQ(c->weight_prefix, "model.language_model.");
  EXPECT_EQ(c->hidden_size, 5120);
  EXPECT_EQ(c->intermediate_size, 17408);
  EXPECT_EQ(c->num_hidden_layers, 64);
  EXPECT_EQ(c->vocab_size, 248320);
  EXPECT_EQ(c->num_attention_heads, 24);
  EXPECT_EQ(c->num_key_value_heads, 4);
  EXPECT_EQ(c->head_dim, 256);
  EXPECT_DOUBLE_EQ(c->partial_rotary_factor, 0.25);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e7);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_TRUE(c->attn_output_gate);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->linear_num_key_heads, 16);
  EXPECT_EQ(c->linear_num_value_heads, 48);
  EXPECT_EQ(c->linear_key_head_dim, 128);
  EXPECT_EQ(c->linear_value_head_dim, 128);
  EXPECT_EQ(c->linear_conv_kernel_dim, 4);
  ASSERT_EQ(c->layer_kinds.size(), 64u);
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(c->layer_kinds[i],
              (i + 1) % 4 == 0 ? setup::TargetLayerKind::kFullAttention : setup::TargetLayerKind::kLinearAttention)
        << i;
  }
}

TEST(TargetConfig, TopLevelQwen35TextConfigUsesModelPrefixAndTopLevelRope) {
  json j = Qwen36_27BText();
  j.erase("rope_parameters");
  j["rope_theta"] = 1e7;
  j["partial_rotary_factor"] = 0.25;
  auto c = setup::ParseTargetConfig(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->weight_prefix, "model.");
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e7);
  EXPECT_DOUBLE_EQ(c->partial_rotary_factor, 0.25);
}

// Absent optional fields read as transformers 5 reads them for Qwen3.5 (Qwen3_5TextConfig's defaults), not as Qwen3's.
TEST(TargetConfig, AbsentQwen35FieldsTakeTransformersDefaults) {
  json j = Qwen36_27BText();
  j.erase("head_dim");
  j["rope_parameters"].erase("partial_rotary_factor");
  auto c = setup::ParseTargetConfig(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->head_dim, 256);
  EXPECT_DOUBLE_EQ(c->partial_rotary_factor, 0.25);
  EXPECT_EQ(c->max_position_embeddings, 32768);
  EXPECT_TRUE(c->attn_output_gate);
  j["max_position_embeddings"] = 262144;
  EXPECT_EQ(setup::ParseTargetConfig(j)->max_position_embeddings, 262144);
  j["max_position_embeddings"] = 0;
  EXPECT_EQ(setup::ParseTargetConfig(j).status().code(), ErrorCode::kInvalidArgument);
  auto dense = setup::ParseTargetConfig(Qwen3_8B());
  ASSERT_TRUE(dense.ok());
  EXPECT_DOUBLE_EQ(dense->partial_rotary_factor, 1.0);
}

// transformers' Qwen3.5 ignores attn_output_gate and always gates: a false there would be misread silently.
TEST(TargetConfig, UngatedQwen35AttentionIsUnsupported) {
  json j = Qwen36_27B();
  j["text_config"]["attn_output_gate"] = false;
  Status st = setup::ParseTargetConfig(j, "m/config.json").status();
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("m/config.json.text_config: \"attn_output_gate\": false"), std::string::npos)
      << st.message();
  j["text_config"].erase("attn_output_gate");
  auto c = setup::ParseTargetConfig(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->attn_output_gate);
}

TEST(TargetConfig, LayerTypesOverrideTheInterval) {
  json j = Qwen36_27BText();
  j["num_hidden_layers"] = 4;
  j["layer_types"] = {"full_attention", "linear_attention", "linear_attention", "full_attention"};
  auto c = setup::ParseTargetConfig(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->layer_kinds, (std::vector<setup::TargetLayerKind>{setup::TargetLayerKind::kFullAttention,
                                                          setup::TargetLayerKind::kLinearAttention,
                                                          setup::TargetLayerKind::kLinearAttention,
                                                          setup::TargetLayerKind::kFullAttention}));
  j["layer_types"] = {"full_attention", "linear_attention", "linear_attention"};
  Status st = setup::ParseTargetConfig(j).status();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("layer_types has 3 entries"), std::string::npos) << st.message();
  j["layer_types"] = {"full_attention", "mamba", "linear_attention", "full_attention"};
  st = setup::ParseTargetConfig(j).status();
  EXPECT_NE(st.message().find("layer_types[1]"), std::string::npos) << st.message();
}

TEST(TargetConfig, Qwen3DenseConfigParses) {
  auto c = setup::ParseTargetConfig(Qwen3_8B());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, setup::TargetArch::kQwen3Dense);
  EXPECT_EQ(c->weight_prefix, "model.");
  EXPECT_EQ(c->num_hidden_layers, 36);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c->partial_rotary_factor, 1.0);
  EXPECT_FALSE(c->attn_output_gate);
  EXPECT_EQ(c->layer_kinds, std::vector<setup::TargetLayerKind>(36, setup::TargetLayerKind::kFullAttention));
}

TEST(TargetConfig, MissingAndMistypedFieldsNameTheField) {
  json j = Qwen36_27B();
  j["text_config"].erase("linear_num_value_heads");
  Status st = setup::ParseTargetConfig(j, "m/config.json").status();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "m/config.json.text_config: field \"linear_num_value_heads\" is missing");

  j = Qwen3_8B();
  j["hidden_size"] = "4096";
  st = setup::ParseTargetConfig(j, "cfg").status();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("\"hidden_size\" must be an integer"), std::string::npos) << st.message();

  j = Qwen3_8B();
  j.erase("rope_theta");
  st = setup::ParseTargetConfig(j).status();
  EXPECT_NE(st.message().find("rope_theta"), std::string::npos) << st.message();

  j = Qwen3_8B();
  j["num_key_value_heads"] = 5;
  EXPECT_EQ(setup::ParseTargetConfig(j).status().code(), ErrorCode::kInvalidArgument);

  j = Qwen3_8B();
  j["num_hidden_layers"] = 0;
  EXPECT_EQ(setup::ParseTargetConfig(j).status().code(), ErrorCode::kInvalidArgument);

  j = Qwen3_8B();
  j["model_type"] = "llama";
  st = setup::ParseTargetConfig(j).status();
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("llama"), std::string::npos);

  j = Qwen3_8B();
  j["tie_word_embeddings"] = 1;
  EXPECT_EQ(setup::ParseTargetConfig(j).status().code(), ErrorCode::kInvalidArgument);
}

TEST(TargetConfig, LoadsFromAModelFolderWithClearErrors) {
  TempDir dir;
  EXPECT_EQ(setup::LoadTargetConfig(dir.path()).status().code(), ErrorCode::kNotFound);
  WriteFile(dir.path() / "config.json", "{ broken");
  Status st = setup::LoadTargetConfig(dir.path()).status();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("config.json"), std::string::npos);
  WriteFile(dir.path() / "config.json", Qwen36_27B().dump());
  auto c = setup::LoadTargetConfig(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->num_hidden_layers, 64);
}

TEST(DrafterConfig, Qwen36DrafterParses) {
  auto d = setup::ParseDrafterConfig(Drafter27B());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->hidden_size, 5120);
  EXPECT_EQ(d->num_hidden_layers, 5);
  EXPECT_EQ(d->num_attention_heads, 32);
  EXPECT_EQ(d->num_key_value_heads, 8);
  EXPECT_EQ(d->head_dim, 128);
  EXPECT_EQ(d->block_size, 16);
  EXPECT_EQ(d->mask_token_id, 248070);
  EXPECT_EQ(d->num_target_layers, 64);
  EXPECT_EQ(d->sliding_window, 2048);
  EXPECT_EQ(d->target_layer_ids, (std::vector<std::int64_t>{1, 16, 31, 46, 61}));
  json with_length = Drafter27B();
  with_length["max_position_embeddings"] = 262144;
  EXPECT_EQ(setup::ParseDrafterConfig(with_length)->max_position_embeddings, 262144);
  EXPECT_EQ(d->layer_kinds, (std::vector<setup::DrafterLayerKind>{
                                setup::DrafterLayerKind::kSlidingAttention, setup::DrafterLayerKind::kSlidingAttention,
                                setup::DrafterLayerKind::kSlidingAttention, setup::DrafterLayerKind::kSlidingAttention,
                                setup::DrafterLayerKind::kFullAttention}));
  auto target = setup::ParseTargetConfig(Qwen36_27B());
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(*setup::ResolveTappedLayers(*d, *target), (std::vector<std::int64_t>{1, 16, 31, 46, 61}));
}

TEST(DrafterConfig, FieldsUnderDflashConfigOrTopLevelAndDefaults) {
  json j = Drafter27B();
  j.erase("block_size");
  j["dflash_config"]["block_size"] = 8;
  j.erase("layer_types");
  j.erase("sliding_window");
  j["dflash_config"].erase("target_layer_ids");
  auto d = setup::ParseDrafterConfig(j);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->block_size, 8);
  EXPECT_EQ(d->max_position_embeddings, 32768);  // Qwen3Config's default
  EXPECT_TRUE(d->target_layer_ids.empty());
  EXPECT_EQ(d->layer_kinds, std::vector<setup::DrafterLayerKind>(5, setup::DrafterLayerKind::kFullAttention));
  // No target_layer_ids: the spec's formula against the target's depth.
  auto dense = setup::ParseTargetConfig(Qwen3_8B());
  ASSERT_TRUE(dense.ok());
  d->num_target_layers = std::nullopt;
  EXPECT_EQ(*setup::ResolveTappedLayers(*d, *dense), (std::vector<std::int64_t>{1, 9, 17, 25, 33}));
}

TEST(DrafterConfig, InconsistentDrafterAndTargetAreRejected) {
  auto d = setup::ParseDrafterConfig(Drafter27B());
  auto dense = setup::ParseTargetConfig(Qwen3_8B());
  ASSERT_TRUE(d.ok() && dense.ok());
  Status st = setup::ResolveTappedLayers(*d, *dense).status();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("64-layer"), std::string::npos) << st.message();
  d->num_target_layers = std::nullopt;
  st = setup::ResolveTappedLayers(*d, *dense).status();
  EXPECT_NE(st.message().find("layer 46"), std::string::npos) << st.message();
}

TEST(DrafterConfig, MissingAndMistypedFieldsNameTheField) {
  json j = Drafter27B();
  j["dflash_config"].erase("mask_token_id");
  Status st = setup::ParseDrafterConfig(j, "d/config.json").status();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("\"mask_token_id\" is missing"), std::string::npos) << st.message();

  j = Drafter27B();
  j.erase("sliding_window");
  st = setup::ParseDrafterConfig(j).status();
  EXPECT_NE(st.message().find("sliding_window"), std::string::npos) << st.message();

  j = Drafter27B();
  j["layer_types"] = {"full_attention"};
  st = setup::ParseDrafterConfig(j).status();
  EXPECT_NE(st.message().find("layer_types has 1 entries"), std::string::npos) << st.message();

  j = Drafter27B();
  j["layer_types"][0] = "linear_attention";
  EXPECT_EQ(setup::ParseDrafterConfig(j).status().code(), ErrorCode::kInvalidArgument);

  j = Drafter27B();
  j["dflash_config"]["target_layer_ids"] = {1, 31, 16};
  st = setup::ParseDrafterConfig(j).status();
  EXPECT_NE(st.message().find("strictly increasing"), std::string::npos) << st.message();

  j = Drafter27B();
  j["dflash_config"]["target_layer_ids"] = {1, 64};
  EXPECT_EQ(setup::ParseDrafterConfig(j).status().code(), ErrorCode::kInvalidArgument);

  j = Drafter27B();
  j["block_size"] = 16.5;
  st = setup::ParseDrafterConfig(j).status();
  EXPECT_NE(st.message().find("\"block_size\" must be an integer"), std::string::npos) << st.message();

  j = Drafter27B();
  j["dflash_config"]["mask_token_id"] = 300000;
  st = setup::ParseDrafterConfig(j).status();
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos) << st.message();

  j = Drafter27B();
  j["dflash_config"] = 3;
  EXPECT_EQ(setup::ParseDrafterConfig(j).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace dflash::trainer
