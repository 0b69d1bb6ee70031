// The xent family's plug-in surface: name, sources, space, constraints (structural and per bucket), compile specs,
// block shapes, seeds.
#include "kernels/xent/xent_family.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kernels/xent/xent_config.h"

namespace dflash::xent {
namespace {

using tuner::Config;

tuner::Problem BucketFor(std::int64_t vocab, bool grad = true) {
  return *Family().Bucket(MakeProblem(2048, vocab, grad));
}

Config C(int threads, int vec, int unroll, int split) {
  return {{"threads", threads}, {"vec", vec}, {"unroll", unroll}, {"split", split}};
}

TEST(XentFamily, NamesItselfAndEmbedsItsSourcesFreeOfHostHeaders) {
  EXPECT_EQ(Family().name(), "xent");
  EXPECT_FALSE(Family().summary().empty());
  std::set<std::string> names;
  for (const EmbeddedFile& f : Family().sources()) names.insert(f.name);
  EXPECT_EQ(names, (std::set<std::string>{"xent.cu", "xent.cuh", "xent_params.h", "cluster.cuh", "ptx.cuh"}));
  // Every #include of the kernel sources is another embedded file or cuda_bf16.h.
  for (const EmbeddedFile& f : Family().sources()) {
    const std::string text(f.text());
    for (std::size_t at = text.find("#include"); at != std::string::npos; at = text.find("#include", at + 1)) {
      const std::string line = text.substr(at, text.find('\n', at) - at);
      const std::size_t q = line.find('"');
      const bool ok = line.find("<cuda_bf16.h>") != std::string::npos ||
                      (q != std::string::npos && names.count(line.substr(q + 1, line.find('"', q + 1) - q - 1)));
      EXPECT_TRUE(ok) << f.name << ": " << line;
    }
  }
}

TEST(XentFamily, SpaceIsTheProductOfItsParamsAndAFewDozenPointsAreValid) {
  std::size_t product = 1;
  std::set<std::string> names;
  for (const auto& p : Family().params()) {
    product *= p.values.size();
    names.insert(p.name);
    EXPECT_FALSE(p.help.empty());
  }
  EXPECT_EQ(names, (std::set<std::string>{"threads", "vec", "unroll", "split"}));
  EXPECT_EQ(tuner::EnumerateSpace(Family()).size(), product);
  std::size_t valid = 0;
  for (const Config& c : tuner::EnumerateSpace(Family())) valid += GeometryInvalidReason(c).empty();
  EXPECT_EQ(valid, 60u);  // float4: 4 x 3 x 4; scalar: 4 x 3 without a cluster
}

TEST(XentFamily, EveryVocabKeepsAValidConfigAndTheTrainersVocabKeepsThemAll) {
  for (std::int64_t vocab : {1, 3, 4, 5, 127, 1024, 1001, 50000, 248320, 1 << 20}) {
    std::size_t valid = 0;
    for (const Config& c : tuner::EnumerateSpace(Family()))
      valid += Family().InvalidReason(c, BucketFor(vocab)).empty();
    EXPECT_GE(valid, 1u) << vocab;
    if (vocab == 248320) {
      EXPECT_EQ(valid, 60u);
    }
    if (vocab == 1024) {
      EXPECT_EQ(valid, 10u);  // NOTES.md counts them
    }
  }
  EXPECT_EQ(Family().InvalidReason(C(128, 1, 2, 1), BucketFor(1)), "");
}

TEST(XentFamily, InvalidReasonStatesWhy) {
  EXPECT_NE(Family().InvalidReason(C(256, 1, 4, 2), BucketFor(248320)).find("vec=1 only with split=1"),
            std::string::npos);
  // 1024 words = 256 float4: 512 threads would leave half of them without a vector.
  EXPECT_NE(Family().InvalidReason(C(512, 4, 2, 1), BucketFor(1024)).find("some threads would load nothing"),
            std::string::npos);
  EXPECT_EQ(Family().InvalidReason(C(256, 4, 2, 1), BucketFor(1024)), "");
  EXPECT_NE(Family().InvalidReason(C(256, 4, 4, 1), BucketFor(1024)).find("holds no more than unroll=2"),
            std::string::npos);
  EXPECT_NE(Family().InvalidReason(C(256, 4, 2, 2), BucketFor(1024)).find("slice"), std::string::npos);
  EXPECT_EQ(Family().InvalidReason(C(128, 4, 2, 2), BucketFor(1024)), "");
  EXPECT_EQ(Family().InvalidReason(C(1024, 4, 8, 8), BucketFor(248320)), "");
  // Malformed configs and buckets.
  EXPECT_NE(Family().InvalidReason(Config{{"threads", 256}}, BucketFor(1024)).find("missing"), std::string::npos);
  Config extra = C(256, 4, 2, 1);
  extra["bogus"] = 1;
  EXPECT_NE(Family().InvalidReason(extra, BucketFor(1024)).find("unknown parameter"), std::string::npos);
  EXPECT_NE(Family().InvalidReason(C(256, 2, 2, 1), BucketFor(1024)).find("not a value"), std::string::npos);
  EXPECT_NE(Family().InvalidReason(C(256, 4, 2, 1), tuner::Problem{{"rows", 1}}).find("xent bucket: "),
            std::string::npos);
}

TEST(XentFamily, CompileSpecInstantiatesTheKernelOfTheConfigAndTheBucketsGradFlag) {
  const tuner::CompileSpec spec = Family().MakeCompileSpec(C(1024, 4, 8, 8), BucketFor(248320, true));
  EXPECT_EQ(spec.main_file, "xent.cu");
  ASSERT_EQ(spec.name_expressions.size(), 1u);
  EXPECT_EQ(spec.name_expressions[0], "dflash_xent::xent_rows_split<1024, 4, 8, 8, true>");
  EXPECT_EQ(Family().MakeCompileSpec(C(256, 1, 2, 1), BucketFor(1024, false)).name_expressions[0],
            "dflash_xent::xent_rows<256, 1, 2, false>");
  bool main_embedded = false;
  for (const EmbeddedFile& f : Family().sources()) main_embedded |= spec.main_file == f.name;
  EXPECT_TRUE(main_embedded);
  // Every (config, grad) gets a distinct spec (the cache key hashes it).
  std::set<std::string> exprs;
  for (bool grad : {true, false})
    for (const Config& c : tuner::EnumerateSpace(Family()))
      exprs.insert(Family().MakeCompileSpec(c, BucketFor(248320, grad)).name_expressions.at(0));
  EXPECT_EQ(exprs.size(), 2 * tuner::EnumerateSpace(Family()).size());
}

TEST(XentFamily, BlockShapeIsTheThreadsParamWithoutDynamicSharedMemory) {
  const auto shape = Family().BlockShapeOf(C(512, 4, 4, 2), BucketFor(248320));
  EXPECT_EQ(shape.threads, 512u);
  EXPECT_EQ(shape.dynamic_shared_bytes, 0u);
}

TEST(XentFamily, SeedsAreValidForTheVocabsTheyWereChosenFor) {
  const auto seeds = Family().SeedConfigs(BucketFor(248320));
  ASSERT_GE(seeds.size(), 4u);
  EXPECT_EQ(seeds.front(), C(1024, 4, 8, 8));
  std::size_t for_big = 0, for_small = 0;
  for (const Config& c : seeds) {
    for_big += Family().InvalidReason(c, BucketFor(248320)).empty();
    for_small += Family().InvalidReason(c, BucketFor(1024)).empty();
  }
  EXPECT_GE(for_big, 4u);
  EXPECT_GE(for_small, 2u);
}

TEST(XentFamily, GeometryOfAValidConfigAndAnErrorOtherwise) {
  Result<Geometry> g = GeometryOf(C(512, 4, 4, 2));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->threads, 512);
  EXPECT_EQ(g->vec, 4);
  EXPECT_EQ(g->unroll, 4);
  EXPECT_EQ(g->split, 2);
  EXPECT_EQ(GeometryOf(C(512, 1, 4, 2)).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace dflash::xent
