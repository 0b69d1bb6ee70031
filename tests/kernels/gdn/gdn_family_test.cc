// The gdn family's problem, space and tuner-facing description (CPU only).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kernels/gdn/gdn_config.h"
#include "kernels/gdn/gdn_family.h"
#include "kernels/gdn/gdn_layout.h"
#include "kernels/gdn/gdn_problem.h"

namespace dflash::gdn {
namespace {

TEST(GdnProblem, TargetShapeParsesAndBucketsTokensUpToAPowerOfTwo) {
  Result<ProblemSpec> s = ParseProblem(MakeProblem(16, 48, 5000, 3, true, true));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->heads, 16);
  EXPECT_EQ(s->value_heads, 48);
  const ProblemSpec b = BucketOf(*s);
  EXPECT_EQ(b.tokens, 8192);
  EXPECT_EQ(b.num_seqs, 4);
  EXPECT_TRUE(b.initial_state);
  EXPECT_EQ(BucketOf(*ParseProblem(MakeProblem(16, 48, 3))).tokens, kMinTokenBucket);
}

TEST(GdnProblem, BadProblemsNameTheField) {
  auto code_of = [](const tuner::Problem& p) { return ParseProblem(p).status().code(); };
  EXPECT_EQ(code_of(MakeProblem(16, 40, 100)), ErrorCode::kInvalidArgument);  // 40 % 16
  EXPECT_EQ(code_of(MakeProblem(16, 48, 0)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(MakeProblem(16, 48, 10, 11)), ErrorCode::kInvalidArgument);
  tuner::Problem p = MakeProblem(16, 48, 100);
  p["head_dim"] = 64;
  EXPECT_EQ(code_of(p), ErrorCode::kUnsupported);
  p = MakeProblem(16, 48, 100);
  p["colour"] = 1;
  Result<ProblemSpec> r = ParseProblem(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("colour"), std::string::npos);
}

TEST(GdnConfig, EveryPointOfTheSpaceHasItsKernelsAndSharedMemory) {
  const tuner::KernelFamily& f = ChunkedForwardFamily();
  EXPECT_EQ(f.name(), "gdn");
  const tuner::Problem bucket = *f.Bucket(MakeProblem(16, 48, 8192));
  std::set<std::string> expressions;
  std::size_t valid = 0;
  for (const tuner::Config& c : tuner::EnumerateSpace(f)) {
    const std::string why = f.InvalidReason(c, bucket);
    if (!why.empty()) continue;
    ++valid;
    Result<Geometry> g = GeometryOf(c);
    ASSERT_TRUE(g.ok());
    const tuner::CompileSpec spec = f.MakeCompileSpec(c, bucket);
    EXPECT_EQ(spec.main_file, "gdn_kernels.cu");
    ASSERT_EQ(spec.name_expressions.size(), 6u);
    EXPECT_NE(spec.name_expressions[0].find("gdn_chunk_prep<" + std::to_string(g->chunk)), std::string::npos);
    for (const auto& e : spec.name_expressions) expressions.insert(e);
    const auto shape = f.BlockShapeOf(c, bucket);
    EXPECT_EQ(shape.threads, std::max(32u * g->warps, kCombineThreads));
    EXPECT_GE(shape.dynamic_shared_bytes, static_cast<std::size_t>(::gdn::StateSharedBytes(g->chunk, g->state_bv)));
  }
  EXPECT_EQ(valid, tuner::EnumerateSpace(f).size());  // 8192 tokens: every segment length splits
  EXPECT_GT(expressions.size(), 10u);
}

TEST(GdnConfig, SharedMemoryOfTheDefaultVariantFitsSm120) {
  const Geometry g;  // chunk 64, state 32, out 64, 4 warps
  EXPECT_EQ(PrepSharedBytesOf(g), 61952);
  EXPECT_EQ(StateSharedBytesOf(g), 73728);
  EXPECT_EQ(OutputSharedBytesOf(g), 80128);
  EXPECT_LE(MaxSharedBytesOf(g), 101376);
  Geometry big = g;
  big.out_bv = 128;
  EXPECT_GT(OutputSharedBytesOf(big), 101376) << "expected to be pruned on sm_120 (fits sm_90)";
}

TEST(GdnConfig, ConfigsOutsideTheSpaceAreInvalidWithAReason) {
  const tuner::KernelFamily& f = ChunkedForwardFamily();
  const tuner::Problem bucket = *f.Bucket(MakeProblem(16, 48, 1000));  // bucket 1024 tokens = 16 chunks of 64
  tuner::Config c = ConfigOf(Geometry{});
  EXPECT_EQ(f.InvalidReason(c, bucket), "");
  c["chunk"] = 48;
  EXPECT_NE(f.InvalidReason(c, bucket).find("chunk"), std::string::npos);
  c = ConfigOf(Geometry{});
  c.erase("warps");
  EXPECT_NE(f.InvalidReason(c, bucket).find("warps"), std::string::npos);
  c = ConfigOf(Geometry{});
  c["segment_chunks"] = 16;
  EXPECT_NE(f.InvalidReason(c, bucket).find("no split"), std::string::npos);
}

}  // namespace
}  // namespace dflash::gdn
