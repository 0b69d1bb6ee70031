#include "setup/presets.h"

#include <algorithm>
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "tests/temp_dir.h"
#include "kernels/registry.h"

namespace dflash::setup {
namespace {

void Write(const std::filesystem::path& p, const nlohmann::json& j) {
  std::ofstream f(p);
  f << j.dump(2);
}

std::map<std::string, std::vector<tuner::Problem>> ByFamily(const std::vector<KernelRequest>& items) {
  std::map<std::string, std::vector<tuner::Problem>> out;
  for (const auto& it : items) out[std::string(it.family->name())].push_back(it.problem);
  return out;
}

// The kernel requests of a setup (no notes expected).
std::vector<KernelRequest> Requests(const TrainingSetup& s) {
  auto r = KernelRequestsFor(s);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  EXPECT_TRUE(r->notes.empty());
  return r->requests;
}

// A complete Hugging Face config of a small hybrid target / drafter, as a user's config.json would be.
nlohmann::json HybridTarget(bool nested) {
  nlohmann::json text = {{"model_type", "qwen3_5_text"},  {"hidden_size", 1024},         {"intermediate_size", 2048},
                         {"num_hidden_layers", 8},        {"full_attention_interval", 4}, {"num_attention_heads", 8},
                         {"num_key_value_heads", 2},      {"head_dim", 128},             {"linear_num_key_heads", 4},
                         {"linear_num_value_heads", 8},   {"linear_key_head_dim", 128},  {"linear_value_head_dim", 128},
                         {"linear_conv_kernel_dim", 4},   {"vocab_size", 4096},          {"rms_norm_eps", 1e-6},
                         {"rope_theta", 1e7}};
  if (!nested) return text;
  return {{"model_type", "qwen3_5"}, {"text_config", text}};
}
nlohmann::json Drafter(bool sliding) {
  nlohmann::json d = {{"hidden_size", 1024},     {"intermediate_size", 2048}, {"num_hidden_layers", 2},
                      {"num_attention_heads", 16}, {"num_key_value_heads", 4},  {"head_dim", 128},
                      {"rms_norm_eps", 1e-6},     {"rope_theta", 1e7},         {"block_size", 16},
                      {"mask_token_id", 4095}};
  if (sliding) {
    d["layer_types"] = {"sliding_attention", "full_attention"};
    d["sliding_window"] = 512;
  }
  return d;
}

TEST(Presets, DefaultPresetCoversTheDflash27bSetupForEveryFamily) {
  auto preset = Preset("dflash-27b");
  ASSERT_TRUE(preset.ok()) << preset.status().ToString();
  const auto items = Requests(*preset);
  auto by = ByFamily(items);
  for (const tuner::KernelFamily* f : kernels::AllFamilies())
    EXPECT_TRUE(by.count(std::string(f->name()))) << f->name();
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
  for (const auto& it : items) EXPECT_TRUE(it.family->Bucket(it.problem).ok()) << it.operation;
}

TEST(Presets, ConfigFileDerivesProblemsFromHuggingFaceConfigs) {
  dflash::testing::TempDir dir;
  // A multimodal Qwen3.5-style config nests the text model under text_config.
  Write(dir.path() / "target.json", HybridTarget(/*nested=*/true));
  Write(dir.path() / "drafter.json", Drafter(/*sliding=*/false));
  Write(dir.path() / "train.json", {{"target_config", "target.json"}, {"drafter_config", "drafter.json"},
                                    {"max_length", 2048}, {"batch_size", 2}, {"num_anchors", 64}});
  auto training = SetupFromConfigFile(dir.path() / "train.json");
  ASSERT_TRUE(training.ok()) << training.status().ToString();
  const auto items = Requests(*training);
  auto by = ByFamily(items);
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
  auto pad_setup = SetupFromConfigFile(dir.path() / "pad.json");
  ASSERT_TRUE(pad_setup.ok()) << pad_setup.status().ToString();
  const auto pad = Requests(*pad_setup);
  for (const auto& it : pad) {
    EXPECT_FALSE(it.problem.contains("doc_bound")) << it.operation;
    EXPECT_LE(it.problem.value("num_seqs", 1), 1) << it.operation;
    EXPECT_NE(it.problem.value("mask", ""), "doc_causal") << it.operation;
  }
  Write(dir.path() / "pack.json", {{"target_config", "target.json"}, {"drafter_config", "drafter.json"},
                                   {"max_length", 2048}, {"rows", "pack"}});
  auto pack_setup = SetupFromConfigFile(dir.path() / "pack.json");
  ASSERT_TRUE(pack_setup.ok()) << pack_setup.status().ToString();
  const auto pack = Requests(*pack_setup);
  // The row-wise families (norms, loss) have one key for both layouts: every selection warms them.
  auto row_wise = [](const KernelRequest& it) {
    const std::string_view f = it.family->name();
    return f == "rmsnorm" || f == "rmsnorm_bwd" || f == "rope" || f == "swiglu" || f == "xent";
  };
  const auto shared = std::count_if(items.begin(), items.end(), row_wise);
  EXPECT_GT(shared, 0);
  EXPECT_EQ(std::count_if(pad.begin(), pad.end(), row_wise), shared);
  EXPECT_EQ(std::count_if(pack.begin(), pack.end(), row_wise), shared);
  EXPECT_EQ(pack.size() + pad.size(), items.size() + shared);
  for (const auto& it : pack) {
    if (row_wise(it)) continue;
    const bool packed = it.problem.value("doc_bound", false) || it.problem.value("num_seqs", 1) == 8 ||
                        it.problem.value("mask", "") == "doc_causal";
    EXPECT_TRUE(packed) << it.operation;
  }
  Write(dir.path() / "bad.json", {{"target_config", "target.json"}, {"rows", "both please"}});
  auto bad = SetupFromConfigFile(dir.path() / "bad.json");
  EXPECT_NE(bad.status().message().find("\"rows\" must be"), std::string::npos) << bad.status().ToString();
}

TEST(Presets, DenseQwen3TargetHasNoGatedDeltaNetProblems) {
  TrainingSetup s;
  auto target = ParseTargetConfig({{"model_type", "qwen3"},  {"hidden_size", 4096},       {"intermediate_size", 12288},
                                   {"num_hidden_layers", 36}, {"num_attention_heads", 32}, {"num_key_value_heads", 8},
                                   {"head_dim", 128},        {"vocab_size", 151936},     {"rms_norm_eps", 1e-6},
                                   {"rope_theta", 1e6}});
  ASSERT_TRUE(target.ok()) << target.status().ToString();
  s.target = *target;
  auto by = ByFamily(Requests(s));
  EXPECT_FALSE(by.count("conv1d"));
  EXPECT_FALSE(by.count("gdn"));
  EXPECT_EQ(by["attention_fwd"].size(), 2u);
}

TEST(Presets, TheTinyPresetIsTheTestModelWithBothLayerKindsAndBothDrafterMasks) {
  auto tiny = Preset("tiny");
  ASSERT_TRUE(tiny.ok()) << tiny.status().ToString();
  EXPECT_EQ(tiny->max_length, 512);
  EXPECT_EQ(tiny->num_anchors, 16);
  EXPECT_EQ(tiny->target.arch, TargetArch::kQwen3_5Hybrid);
  ASSERT_TRUE(tiny->drafter.has_value());
  EXPECT_EQ(tiny->drafter->hidden_size, tiny->target.hidden_size);
  auto by = ByFamily(Requests(*tiny));
  // Padded and packed rows of every family; the drafter's full and sliding layers, forward and backward.
  EXPECT_EQ(by["conv1d"].size(), 2u);
  EXPECT_EQ(by["gdn"].size(), 2u);
  EXPECT_EQ(by["attention_fwd"].size(), 2u + 4u);
  EXPECT_EQ(by["attention_bwd"].size(), 4u);
  // Once for both layouts: the target's hidden norm without and with the residual add, q, k and the gated norm; the
  // drafter's trained norms (context, block rows, q, k: forward and backward); the loss over the row's 16 * 16
  // block rows in one chunk.
  EXPECT_EQ(by["rmsnorm"].size(), 5u + 4u);
  ASSERT_EQ(by["rmsnorm_bwd"].size(), 4u);
  for (const auto& p : by["rmsnorm_bwd"]) {
    EXPECT_EQ(p["weight"], "fp32");
    EXPECT_EQ(p["kind"], "standard");
  }
  EXPECT_EQ(by["rmsnorm_bwd"][0]["rows"], 512);  // the context norm: max_length rows
  ASSERT_EQ(by["xent"].size(), 1u);
  EXPECT_EQ(by["xent"][0]["rows"], 256);
  // The rotary embeddings: the target's q and k (64 dims, 16 rotated), the drafter's q over the block rows and k
  // over the context and block rows (64 dims, all rotated).
  ASSERT_EQ(by["rope"].size(), 4u);
  ASSERT_EQ(by["swiglu"].size(), 1u);  // the target MLP's silu(gate) * up over [512, 512]
  EXPECT_EQ(by["swiglu"][0], swiglu::MakeProblem(512, tiny->target.intermediate_size));
  EXPECT_EQ(by["rope"][0], rope::MakeProblem(512, tiny->target.num_attention_heads, 64, 16));
  EXPECT_EQ(by["rope"][3], rope::MakeProblem(512 + 256, tiny->drafter->num_key_value_heads, 64, 64));
}

TEST(TrainingSetup, AGatedDeltaRuleTheFamilyDoesNotServeIsLeftOutWithANote) {
  auto training = Preset("tiny");
  ASSERT_TRUE(training.ok());
  training->target.linear_key_head_dim = training->target.linear_value_head_dim = 64;
  auto r = KernelRequestsFor(*training);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->notes.size(), 1u);
  EXPECT_NE(r->notes[0].find("head dims 64/64"), std::string::npos) << r->notes[0];
  auto by = ByFamily(r->requests);
  EXPECT_FALSE(by.count("gdn"));
  EXPECT_EQ(by["conv1d"].size(), 2u);
}

TEST(TrainingSetup, AConvolutionWidthTheFamilyDoesNotServeIsUnsupported) {
  auto training = Preset("tiny");
  ASSERT_TRUE(training.ok());
  training->target.linear_conv_kernel_dim = 3;
  EXPECT_EQ(KernelRequestsFor(*training).status().code(), ErrorCode::kUnsupported);
  // The drafter's side runs no conv1d: its requests do not depend on the target's convolution.
  auto drafter_side = KernelRequestsFor(*training, OpSide::kDrafter);
  ASSERT_TRUE(drafter_side.ok());
  for (const auto& r : drafter_side->requests) {
    const bool drafter_op = r.operation.rfind("draft_attention", 0) == 0 || r.operation == "cross_entropy" ||
                            r.family->name() == "rmsnorm_bwd" || r.problem.value("weight", "") == "fp32" ||
                            r.family->name() == "rope";
    EXPECT_TRUE(drafter_op) << r.operation;
  }
}

TEST(TrainingSetup, EveryRequestIsListedOnceAndTheSidesSplitTheList) {
  auto training = Preset("dflash-27b");
  ASSERT_TRUE(training.ok());
  auto both = KernelRequestsFor(*training);
  auto target = KernelRequestsFor(*training, OpSide::kTarget);
  auto drafter = KernelRequestsFor(*training, OpSide::kDrafter);
  ASSERT_TRUE(both.ok() && target.ok() && drafter.ok());
  std::set<std::string> seen;
  for (const auto& r : both->requests) {
    EXPECT_TRUE(seen.insert(std::string(r.family->name()) + r.problem.dump()).second) << r.operation;
  }
  EXPECT_EQ(target->requests.size() + drafter->requests.size(), both->requests.size());
}

TEST(Presets, BadInputIsAClearError) {
  dflash::testing::TempDir dir;
  EXPECT_EQ(Preset("huge").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(SetupFromConfigFile(dir.path() / "missing.json").status().code(), ErrorCode::kNotFound);
  Write(dir.path() / "a.json", {{"max_length", 10}});
  EXPECT_EQ(SetupFromConfigFile(dir.path() / "a.json").status().code(), ErrorCode::kInvalidArgument);
  Write(dir.path() / "t.json", {{"num_attention_heads", 4}});
  Write(dir.path() / "b.json", {{"target_config", "t.json"}, {"max_length", -5}});
  auto bad = SetupFromConfigFile(dir.path() / "b.json");
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("max_length"), std::string::npos);
  EXPECT_EQ(ParseProblemArg("conv1d").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ParseProblemArg("nosuch={}").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(ParseProblemArg("conv1d={\"tokens\":8,\"channels\":16}").ok());
  // A referenced model config that is incomplete names its file and the field.
  Write(dir.path() / "c.json", {{"target_config", "t.json"}});
  auto incomplete = SetupFromConfigFile(dir.path() / "c.json");
  EXPECT_EQ(incomplete.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(incomplete.status().message().find("t.json"), std::string::npos) << incomplete.status().ToString();
}

}  // namespace
}  // namespace dflash::setup
