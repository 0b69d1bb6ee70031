#include "kernels/presets.h"

#include <gtest/gtest.h>

#include <fstream>

#include "../cache/cache_test_util.h"
#include "kernels/registry.h"

namespace dflash::kernels {
namespace {

void Write(const std::filesystem::path& p, const nlohmann::json& j) {
  std::ofstream f(p);
  f << j.dump(2);
}

std::map<std::string, std::vector<tuner::Problem>> ByFamily(const std::vector<WorkItem>& items) {
  std::map<std::string, std::vector<tuner::Problem>> out;
  for (const auto& it : items) out[std::string(it.family->name())].push_back(it.problem);
  return out;
}

TEST(Presets, DefaultPresetCoversTheDflash27bSetupForEveryFamily) {
  auto shapes = PresetShapes("dflash-27b");
  ASSERT_TRUE(shapes.ok());
  std::vector<std::string> notes;
  auto items = ProblemsFor(*shapes, &notes);
  ASSERT_TRUE(items.ok()) << items.status().ToString();
  auto by = ByFamily(*items);
  for (const tuner::KernelFamily* f : AllFamilies()) EXPECT_TRUE(by.count(std::string(f->name()))) << f->name();
  EXPECT_EQ(by["conv1d"][0]["channels"], 2 * 16 * 128 + 48 * 128);
  EXPECT_EQ(by["conv1d"][0]["tokens"], 4096);
  EXPECT_EQ(by["gdn"][0]["heads"], 16);
  EXPECT_EQ(by["gdn"][0]["value_heads"], 48);
  // Packed rows too: conv1d and gated delta rule over 8 sequences.
  EXPECT_EQ(by["conv1d"].size(), 2u);
  ASSERT_EQ(by["gdn"].size(), 2u);
  EXPECT_EQ(by["gdn"][1]["num_seqs"], 8);
  // Drafter: 512 anchors x 16 rows against 4096 context rows + the block rows; full and sliding, fwd and bwd,
  // padded rows and packed rows (doc_bound).
  ASSERT_EQ(by["attention_bwd"].size(), 4u);
  int packed = 0;
  for (const auto& p : by["attention_bwd"]) packed += p.value("doc_bound", false);
  EXPECT_EQ(packed, 2);
  for (const auto& p : by["attention_bwd"]) {
    EXPECT_EQ(p["seq_q"], 8192);
    EXPECT_EQ(p["seq_kv"], 4096 + 8192);
    EXPECT_EQ(p["heads_q"], 32);
    EXPECT_EQ(p["heads_kv"], 8);
    EXPECT_EQ(p["head_dim"], 128);
  }
  // Target attention: forward only, head dim 256, causal and document-causal.
  int target = 0;
  for (const auto& p : by["attention_fwd"]) target += p["head_dim"] == 256;
  EXPECT_EQ(target, 2);
  // Every problem is one its family accepts.
  for (const auto& it : *items) EXPECT_TRUE(it.family->Bucket(it.problem).ok()) << it.what;
}

TEST(Presets, ConfigFileDerivesProblemsFromHuggingFaceConfigs) {
  cache::testing::TempDir dir;
  // A multimodal Qwen3.5-style config nests the text model under text_config.
  Write(dir.path() / "target.json",
        {{"model_type", "qwen3_5"},
         {"text_config",
          {{"num_attention_heads", 8}, {"num_key_value_heads", 2}, {"head_dim", 128}, {"linear_num_key_heads", 4},
           {"linear_num_value_heads", 8}, {"linear_key_head_dim", 128}, {"linear_value_head_dim", 128},
           {"linear_conv_kernel_dim", 4}}}});
  Write(dir.path() / "drafter.json",
        {{"num_attention_heads", 16}, {"num_key_value_heads", 4}, {"head_dim", 128}, {"block_size", 16}});
  Write(dir.path() / "train.json", {{"target_config", "target.json"}, {"drafter_config", "drafter.json"},
                                    {"max_length", 2048}, {"batch_size", 2}, {"num_anchors", 64}});
  auto shapes = ShapesFromConfigFile(dir.path() / "train.json");
  ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
  auto items = ProblemsFor(*shapes, nullptr);
  ASSERT_TRUE(items.ok()) << items.status().ToString();
  auto by = ByFamily(*items);
  EXPECT_EQ(by["conv1d"][0]["channels"], 2 * 4 * 128 + 8 * 128);
  // dflash-train launches one row at a time: batch_size 2 changes no key.
  EXPECT_EQ(by["conv1d"][0]["tokens"], 2048);
  EXPECT_EQ(by["conv1d"][0]["num_seqs"], 1);
  EXPECT_EQ(by["conv1d"][1]["num_seqs"], 8) << "packed rows";
  ASSERT_EQ(by["attention_bwd"].size(), 2u) << "no sliding_window: only the full layer, padded and packed";
  EXPECT_EQ(by["attention_bwd"][0]["seq_q"], 64 * 16);
  EXPECT_EQ(by["attention_bwd"][0]["batch"], 1);
  // "rows" picks the layouts to warm.
  Write(dir.path() / "pad.json", {{"target_config", "target.json"}, {"drafter_config", "drafter.json"},
                                  {"max_length", 2048}, {"rows", "pad"}});
  auto pad = ProblemsFor(*ShapesFromConfigFile(dir.path() / "pad.json"), nullptr);
  ASSERT_TRUE(pad.ok());
  for (const auto& it : *pad) {
    EXPECT_FALSE(it.problem.contains("doc_bound")) << it.what;
    EXPECT_LE(it.problem.value("num_seqs", 1), 1) << it.what;
    EXPECT_NE(it.problem.value("mask", ""), "doc_causal") << it.what;
  }
  Write(dir.path() / "pack.json", {{"target_config", "target.json"}, {"drafter_config", "drafter.json"},
                                   {"max_length", 2048}, {"rows", "pack"}});
  auto pack = ProblemsFor(*ShapesFromConfigFile(dir.path() / "pack.json"), nullptr);
  ASSERT_TRUE(pack.ok());
  EXPECT_EQ(pack->size() + pad->size(), items->size());
  for (const auto& it : *pack) {
    const bool packed = it.problem.value("doc_bound", false) || it.problem.value("num_seqs", 1) == 8 ||
                        it.problem.value("mask", "") == "doc_causal";
    EXPECT_TRUE(packed) << it.what;
  }
  Write(dir.path() / "bad.json", {{"target_config", "target.json"}, {"rows", "both please"}});
  auto bad = ShapesFromConfigFile(dir.path() / "bad.json");
  EXPECT_NE(bad.status().message().find("\"rows\" must be"), std::string::npos) << bad.status().ToString();
}

TEST(Presets, DenseQwen3TargetHasNoGatedDeltaNetProblems) {
  TrainingShapes s;
  s.target = {{"num_attention_heads", 32}, {"num_key_value_heads", 8}, {"head_dim", 128}};
  auto items = ProblemsFor(s, nullptr);
  ASSERT_TRUE(items.ok());
  auto by = ByFamily(*items);
  EXPECT_FALSE(by.count("conv1d"));
  EXPECT_FALSE(by.count("gdn"));
  EXPECT_EQ(by["attention_fwd"].size(), 2u);
}

TEST(Presets, BadInputIsAClearError) {
  cache::testing::TempDir dir;
  EXPECT_EQ(PresetShapes("huge").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ShapesFromConfigFile(dir.path() / "missing.json").status().code(), ErrorCode::kNotFound);
  Write(dir.path() / "a.json", {{"max_length", 10}});
  EXPECT_EQ(ShapesFromConfigFile(dir.path() / "a.json").status().code(), ErrorCode::kInvalidArgument);
  Write(dir.path() / "t.json", {{"num_attention_heads", 4}});
  Write(dir.path() / "b.json", {{"target_config", "t.json"}, {"max_length", -5}});
  auto bad = ShapesFromConfigFile(dir.path() / "b.json");
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("max_length"), std::string::npos);
  EXPECT_EQ(ParseProblemArg("conv1d").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ParseProblemArg("nosuch={}").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(ParseProblemArg("conv1d={\"tokens\":8,\"channels\":16}").ok());
}

}  // namespace
}  // namespace dflash::kernels
