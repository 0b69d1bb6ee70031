// The rmsnorm family's plug-in surface: name, sources, space, the validity rules per bucket, compile specs, block
// shapes, seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "kernels/rmsnorm/rmsnorm_config.h"
#include "kernels/rmsnorm/rmsnorm_bwd_family.h"
#include "kernels/rmsnorm/rmsnorm_family.h"

namespace dflash::rmsnorm {
namespace {

using tuner::Config;

Config C(int threads, int row_threads, int vec) {
  return {{"row_threads", row_threads}, {"threads", threads}, {"vec", vec}};
}

// The buckets of the model's norms (kernels/rmsnorm/NOTES.md) and the extremes of cols.
std::vector<ProblemSpec> Buckets() {
  return {
      BucketOf({4096, 5120, Kind::kZeroCentred, true, false, WeightDtype::kBf16}),   // target layer norms
      BucketOf({98304, 256, Kind::kZeroCentred, false, false, WeightDtype::kBf16}),  // target q norm
      BucketOf({262144, 128, Kind::kStandard, false, false, WeightDtype::kFp32}),    // drafter q norm
      BucketOf({8192, 5120, Kind::kStandard, false, false, WeightDtype::kFp32}),     // drafter hidden norms
      BucketOf({196608, 128, Kind::kStandard, false, true, WeightDtype::kBf16}),     // gated delta-net norm
      BucketOf({100, 8, Kind::kStandard, false, false, WeightDtype::kBf16}),
      BucketOf({100, 16384, Kind::kStandard, true, true, WeightDtype::kFp32}),
  };
}

// (That the sources include nothing but each other and cuda_bf16.h: tests/kernels/family_sources_test.cc.)
TEST(RmsNormFamily, NamesItselfAndEmbedsItsSources) {
  EXPECT_EQ(Family().name(), "rmsnorm");
  EXPECT_FALSE(Family().summary().empty());
  std::set<std::string> names;
  for (const EmbeddedFile& f : Family().sources()) {
    names.insert(f.name);
    EXPECT_EQ(std::string(f.data).size(), f.size) << f.name;
  }
  EXPECT_EQ(names, (std::set<std::string>{"rmsnorm.cu", "rmsnorm.cuh", "rmsnorm_params.h", "rmsnorm_bwd.cuh",
                                          "rmsnorm_bwd_params.h", "bf16_vec.cuh"}));
  // The backward family compiles from the same translation unit.
  EXPECT_EQ(BackwardFamily().name(), "rmsnorm_bwd");
  EXPECT_EQ(BackwardFamily().sources().data(), Family().sources().data());
}

TEST(RmsNormFamily, SpaceIsTheProductOfItsParams) {
  std::size_t product = 1;
  std::set<std::string> names;
  for (const auto& p : Family().params()) {
    product *= p.values.size();
    names.insert(p.name);
    EXPECT_FALSE(p.help.empty());
  }
  EXPECT_EQ(names, (std::set<std::string>{"row_threads", "threads", "vec"}));
  EXPECT_EQ(tuner::EnumerateSpace(Family()).size(), product);
}

TEST(RmsNormFamily, EveryUseCaseBucketHasAFewDozenValidConfigsThatKeepTheRules) {
  for (const ProblemSpec& b : Buckets()) {
    SCOPED_TRACE(ToJson(b).dump());
    std::size_t valid = 0;
    for (const Config& c : tuner::EnumerateSpace(Family())) {
      if (!Family().InvalidReason(c, ToJson(b)).empty()) continue;
      ++valid;
      const Geometry g = *GeometryOf(c);
      EXPECT_LE(g.row_threads, g.threads);
      EXPECT_EQ(g.rows_per_block * g.row_threads, g.threads);
      EXPECT_LE(g.row_threads * g.vec, b.cols) << tuner::ConfigLabel(c);  // no thread without a vector
      const int elements = VectorsPerThread(g, b.cols) * g.vec;
      EXPECT_GE(elements * g.row_threads, b.cols);
      EXPECT_LE(elements, kMaxElementsPerThread) << tuner::ConfigLabel(c);
      EXPECT_LE(RowRegisters(elements, b) + kOtherRegisters, std::min(255, 65536 / g.threads));
    }
    EXPECT_GE(valid, 4u);
    EXPECT_LE(valid, 48u);
  }
}

TEST(RmsNormFamily, InvalidReasonStatesWhy) {
  const tuner::Problem wide = ToJson(BucketOf({4096, 5120, Kind::kZeroCentred, true, false, WeightDtype::kBf16}));
  const tuner::Problem narrow = ToJson(BucketOf({4096, 128, Kind::kStandard, false, true, WeightDtype::kBf16}));
  EXPECT_EQ(Family().InvalidReason(C(256, 128, 8), wide), "");
  EXPECT_EQ(Family().InvalidReason(C(256, 16, 8), narrow), "");
  EXPECT_NE(Family().InvalidReason(C(128, 256, 8), wide).find("row_threads=256 > threads=128"), std::string::npos);
  EXPECT_NE(Family().InvalidReason(C(256, 32, 8), narrow).find("row_threads=32 > cols/vec=16"), std::string::npos);
  EXPECT_NE(Family().InvalidReason(C(256, 64, 8), wide).find("80 elements per thread > 64"), std::string::npos);
  // 5120 / (8 * 128) = 5 vectors: x and residual in flight need 40 registers + the rest > 64 at 1024 threads.
  EXPECT_NE(Family().InvalidReason(C(1024, 128, 8), wide).find("registers per thread"), std::string::npos);
  EXPECT_EQ(Family().InvalidReason(C(512, 128, 8), wide), "");
  // fp32 weights take a register per element while scaling.
  const tuner::Problem fp32 = ToJson(BucketOf({100, 16384, Kind::kStandard, true, true, WeightDtype::kFp32}));
  const tuner::Problem bf16 = ToJson(BucketOf({100, 16384, Kind::kStandard, true, true, WeightDtype::kBf16}));
  EXPECT_NE(Family().InvalidReason(C(1024, 1024, 8), fp32).find("registers per thread"), std::string::npos);
  EXPECT_EQ(Family().InvalidReason(C(1024, 1024, 8), bf16), "");
  // Malformed configs and buckets.
  EXPECT_NE(Family().InvalidReason(Config{{"threads", 256}}, wide).find("missing"), std::string::npos);
  Config extra = C(256, 128, 8);
  extra["bogus"] = 1;
  EXPECT_NE(Family().InvalidReason(extra, wide).find("unknown parameter"), std::string::npos);
  EXPECT_NE(Family().InvalidReason(C(256, 128, 2), wide).find("not a value"), std::string::npos);
  EXPECT_NE(Family().InvalidReason(C(256, 128, 8), tuner::Problem{{"rows", 1}}).find("not a rmsnorm bucket"),
            std::string::npos);
}

TEST(RmsNormFamily, CompileSpecInstantiatesTheBucketsKernelFromTheMainFile) {
  const ProblemSpec b = BucketOf({4096, 5120, Kind::kZeroCentred, true, false, WeightDtype::kBf16});
  const tuner::CompileSpec spec = Family().MakeCompileSpec(C(256, 128, 8), ToJson(b));
  EXPECT_EQ(spec.main_file, "rmsnorm.cu");
  ASSERT_EQ(spec.name_expressions.size(), 1u);
  EXPECT_EQ(spec.name_expressions[0], "dflash_rmsnorm::rmsnorm_fwd<5120, 8, 128, 256, 1, 1, 1, 0, 0>");
  EXPECT_EQ(Family()
                .MakeCompileSpec(C(128, 4, 4), ToJson(ProblemSpec{1, 128, Kind::kStandard, false, true,
                                                                  WeightDtype::kFp32}))
                .name_expressions[0],
            "dflash_rmsnorm::rmsnorm_fwd<128, 4, 4, 128, 1, 0, 0, 1, 1>");
  bool main_embedded = false;
  for (const EmbeddedFile& f : Family().sources()) main_embedded |= spec.main_file == f.name;
  EXPECT_TRUE(main_embedded);
  // Every config, and every field of the bucket but rows, gets a distinct expression (the cache key hashes it).
  std::set<std::string> exprs;
  for (const Config& c : tuner::EnumerateSpace(Family()))
    exprs.insert(Family().MakeCompileSpec(c, ToJson(b)).name_expressions.at(0));
  EXPECT_EQ(exprs.size(), tuner::EnumerateSpace(Family()).size());
  std::set<std::string> per_field;
  for (const ProblemSpec& v : {b, ProblemSpec{b.rows, 5128, b.kind, b.residual, b.gate, b.weight},
                               ProblemSpec{b.rows, b.cols, Kind::kStandard, b.residual, b.gate, b.weight},
                               ProblemSpec{b.rows, b.cols, b.kind, false, b.gate, b.weight},
                               ProblemSpec{b.rows, b.cols, b.kind, b.residual, true, b.weight},
                               ProblemSpec{b.rows, b.cols, b.kind, b.residual, b.gate, WeightDtype::kFp32}})
    per_field.insert(Family().MakeCompileSpec(C(256, 128, 8), ToJson(v)).name_expressions.at(0));
  EXPECT_EQ(per_field.size(), 6u);
  EXPECT_EQ(Family().MakeCompileSpec(C(256, 128, 8), ToJson(ProblemSpec{1 << 20, 5120, b.kind, b.residual, b.gate,
                                                                         b.weight})).name_expressions,
            spec.name_expressions);
  EXPECT_TRUE(Family().MakeCompileSpec(C(256, 128, 8), tuner::Problem{{"rows", 1}}).name_expressions.empty());
}

TEST(RmsNormFamily, SmallRowsAskForAThousandResidentThreadsAndLargeOnesForOneBlock) {
  const ProblemSpec gated{262144, 128, Kind::kStandard, false, true, WeightDtype::kBf16};
  // 8 elements a thread: 52 registers estimated, within 64, so 1024 threads per SM.
  EXPECT_EQ(MinBlocksPerSm(*GeometryOf(C(256, 16, 8)), gated), 4);
  EXPECT_EQ(MinBlocksPerSm(*GeometryOf(C(128, 16, 8)), gated), 8);
  EXPECT_EQ(MinBlocksPerSm(*GeometryOf(C(1024, 16, 8)), gated), 1);
  EXPECT_NE(Family().MakeCompileSpec(C(256, 16, 8), ToJson(gated)).name_expressions[0].find("<128, 8, 16, 256, 4, "),
            std::string::npos);
  // 40 elements of x and the residual a thread: 80 estimated, so the cap is all a block may hold.
  const ProblemSpec layer{4096, 5120, Kind::kZeroCentred, true, false, WeightDtype::kBf16};
  EXPECT_EQ(MinBlocksPerSm(*GeometryOf(C(256, 128, 8)), layer), 1);
  EXPECT_EQ(MinBlocksPerSm(*GeometryOf(C(256, 256, 8)), layer), 4);  // 24 elements: 64 estimated
}

TEST(RmsNormFamily, BlockShapeIsTheThreadsParamWithoutDynamicSharedMemory) {
  const auto shape = Family().BlockShapeOf(C(512, 128, 8), ToJson(Buckets()[0]));
  EXPECT_EQ(shape.threads, 512u);
  EXPECT_EQ(shape.dynamic_shared_bytes, 0u);
}

TEST(RmsNormFamily, GeometryCoversTheRows) {
  Result<Geometry> g = GeometryOf(C(256, 16, 8));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->rows_per_block, 16);
  EXPECT_EQ(VectorsPerThread(*g, 128), 1);
  EXPECT_EQ(VectorsPerThread(*g, 136), 2);  // 17 vectors over 16 threads
  EXPECT_EQ(GeometryOf(C(128, 256, 8)).status().code(), ErrorCode::kInvalidArgument);
}

TEST(RmsNormFamily, SeedsAreValidSixteenByteSplitsWithTheFewestIdleSlots) {
  for (const ProblemSpec& b : Buckets()) {
    SCOPED_TRACE(ToJson(b).dump());
    const std::vector<Config> seeds = Family().SeedConfigs(ToJson(b));
    ASSERT_FALSE(seeds.empty());
    for (const Config& s : seeds) {
      EXPECT_EQ(Family().InvalidReason(s, ToJson(b)), "") << tuner::ConfigLabel(s);
      EXPECT_EQ(s.at("vec"), 8);
    }
    EXPECT_EQ(std::set<Config>(seeds.begin(), seeds.end()).size(), seeds.size());
  }
  // 5120 = 640 vectors of 8: 128 threads a row hold 5 each with none idle.
  EXPECT_EQ(Family().SeedConfigs(ToJson(Buckets()[0])).front(), C(256, 128, 8));
  // 128 = 16 vectors: 4 threads a row hold 4 each.
  EXPECT_EQ(Family().SeedConfigs(ToJson(Buckets()[4])).front(), C(256, 4, 8));
  EXPECT_TRUE(Family().SeedConfigs(tuner::Problem{{"rows", 1}}).empty());
}

}  // namespace
}  // namespace dflash::rmsnorm
