// kernel_bench's CPU side: option validation, problem parsing, and the instance facts the comparison scripts build
// their side from (DFlash anchors recounted against the spec's mask text, gdn cu_seqlens, determinism by seed).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "kernel_bench_args.h"
#include "kernel_bench_instance.h"

namespace dflash::bench {
namespace {

BenchArgs Valid() {
  BenchArgs a;
  a.family = "gdn";
  a.problem_json = R"({"heads":2,"value_heads":4,"tokens":100})";
  return a;
}

TEST(KernelBenchArgs, DefaultsWithFamilyAndProblemAreValid) { EXPECT_TRUE(ValidateArgs(Valid()).ok()); }

TEST(KernelBenchArgs, BadCountsNameTheOption) {
  BenchArgs a = Valid();
  a.reps = 0;
  EXPECT_NE(ValidateArgs(a).message().find("--reps"), std::string::npos);
  a = Valid();
  a.graph_launches = 0;
  EXPECT_NE(ValidateArgs(a).message().find("--graph-launches"), std::string::npos);
  a = Valid();
  a.warmup = -1;
  EXPECT_NE(ValidateArgs(a).message().find("--warmup"), std::string::npos);
  a = Valid();
  a.timeout_ms = 0;
  EXPECT_NE(ValidateArgs(a).message().find("--timeout-ms"), std::string::npos);
}

TEST(KernelBenchArgs, InstanceOnlyNeedsAnOutputFileAndExcludesResolveOnly) {
  BenchArgs a = Valid();
  a.instance_only = true;
  EXPECT_EQ(ValidateArgs(a).code(), ErrorCode::kInvalidArgument);
  a.instance_out = "/tmp/x.json";
  EXPECT_TRUE(ValidateArgs(a).ok());
  a.resolve_only = true;
  EXPECT_EQ(ValidateArgs(a).code(), ErrorCode::kInvalidArgument);
}

TEST(KernelBenchArgs, ConfigExcludesResolveOnly) {
  BenchArgs a = Valid();
  a.config_json = R"({"chunk":32})";
  EXPECT_TRUE(ValidateArgs(a).ok());
  a.resolve_only = true;
  EXPECT_EQ(ValidateArgs(a).code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(ValidateArgs(a).message().find("--config"), std::string::npos);
}

TEST(KernelBenchArgs, ProblemTextMustBeAJsonObject) {
  EXPECT_FALSE(ParseProblemText("not json").ok());
  EXPECT_FALSE(ParseProblemText("[1, 2]").ok());
  auto p = ParseProblemText(R"({"tokens": 5})");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)["tokens"], 5);
}

// Attended kv positions of one query row, written from the spec's mask text (dflash-training.md), independently of
// kernels/attention/attention_mask.cuh.
long RowCount(const tuner::Problem& p, const nlohmann::json& f, int b, int q) {
  const int bs = p.value("block_size", 16), win = p.value("window", 2048);
  const int j = q / bs, o = q % bs;
  if (f["valid"][b][j] == 0) return 0;
  const int a = f["anchors"][b][j];
  if (p["mask"] == "dflash_full") return a + bs;
  long ctx = 0;
  for (int kv = 0; kv < a; ++kv) ctx += kv >= a + o - (win - 1);
  return ctx + o + 1;
}

TEST(KernelBenchInstance, DflashPairsMatchTheAnchorsUnderTheSpecMask) {
  for (const char* mask : {"dflash_full", "dflash_sliding"}) {
    tuner::Problem p = {{"mask", mask},       {"batch", 2},         {"heads_q", 4},   {"heads_kv", 2},
                        {"head_dim", 64},     {"seq_q", 21 * 16},   {"seq_kv", 500 + 21 * 16},
                        {"block_size", 16},   {"ctx_len", 500},     {"window", 64}};
    if (std::string(mask) == "dflash_full") p.erase("window");
    auto f = InstanceFacts("attention_fwd", p, 7);
    ASSERT_TRUE(f.ok()) << f.status().message();
    ASSERT_EQ((*f)["anchors"].size(), 2u);
    ASSERT_EQ((*f)["anchors"][0].size(), 21u);
    long pairs = 0;
    for (int b = 0; b < 2; ++b) {
      int last = 0;
      for (int j = 0; j < 21; ++j) {
        if ((*f)["valid"][b][j] == 0) continue;
        const int a = (*f)["anchors"][b][j];
        EXPECT_GE(a, last) << "anchors of valid blocks are sorted";
        EXPECT_LE(a, 500);
        last = a;
      }
      EXPECT_EQ((*f)["valid"][b][20], 0) << "the workload's last block is padding (>= 4 blocks)";
      for (int q = 0; q < 21 * 16; ++q) pairs += RowCount(p, *f, b, q);
    }
    EXPECT_EQ((*f)["pairs"].get<double>(), static_cast<double>(pairs)) << mask;
  }
}

TEST(KernelBenchInstance, SameSeedSameFactsOtherSeedOtherAnchors) {
  const tuner::Problem p = {{"mask", "dflash_full"}, {"heads_q", 2}, {"head_dim", 64}, {"seq_q", 64 * 16},
                            {"seq_kv", 1000 + 64 * 16}, {"ctx_len", 1000}};
  auto a = InstanceFacts("attention_bwd", p, 1), b = InstanceFacts("attention_bwd", p, 1);
  auto c = InstanceFacts("attention_bwd", p, 2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ((*a)["anchors"], (*b)["anchors"]);
  EXPECT_NE((*a)["anchors"], (*c)["anchors"]);
}

TEST(KernelBenchInstance, CausalPairsAreTheTriangle) {
  const tuner::Problem p = {{"mask", "causal"}, {"heads_q", 2}, {"head_dim", 64}, {"seq_q", 300}};
  auto f = InstanceFacts("attention_fwd", p, 3);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ((*f)["pairs"].get<double>(), 300.0 * 301 / 2);
  EXPECT_FALSE(f->contains("anchors"));
}

TEST(KernelBenchInstance, GdnCuSeqlensCoverTheTokensInIncreasingOrder) {
  const tuner::Problem p = {{"heads", 2}, {"value_heads", 6}, {"tokens", 5000}, {"num_seqs", 8}};
  auto f = InstanceFacts("gdn", p, 11);
  ASSERT_TRUE(f.ok()) << f.status().message();
  const std::vector<int> cu = (*f)["cu_seqlens"];
  ASSERT_EQ(cu.size(), 9u);
  EXPECT_EQ(cu.front(), 0);
  EXPECT_EQ(cu.back(), 5000);
  EXPECT_TRUE(std::adjacent_find(cu.begin(), cu.end(), [](int x, int y) { return y <= x; }) == cu.end());
  auto g = InstanceFacts("gdn", p, 12);
  ASSERT_TRUE(g.ok());
  EXPECT_NE((*g)["cu_seqlens"], (*f)["cu_seqlens"]);
  auto one = InstanceFacts("gdn", {{"heads", 2}, {"value_heads", 6}, {"tokens", 77}}, 11);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ((*one)["cu_seqlens"], nlohmann::json({0, 77}));
}

TEST(KernelBenchInstance, BadProblemsAndFamiliesWithoutFactsAreErrors) {
  EXPECT_EQ(InstanceFacts("gdn", {{"heads", 2}}, 1).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(InstanceFacts("conv1d", {{"tokens", 10}, {"channels", 64}}, 1).status().code(),
            ErrorCode::kUnsupported);
}

TEST(KernelBenchInstance, WriteJsonFileRoundTripsAndLeavesNoTemporary) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kernel_bench_test_" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "facts.json").string();
  const nlohmann::json facts = {{"cu_seqlens", {0, 3, 9}}, {"family", "gdn"}};
  ASSERT_TRUE(WriteJsonFile(path, facts).ok());
  std::ifstream in(path);
  EXPECT_EQ(nlohmann::json::parse(in), facts);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(WriteJsonFile((dir / "missing" / "x.json").string(), facts).code(), ErrorCode::kIoError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dflash::bench
