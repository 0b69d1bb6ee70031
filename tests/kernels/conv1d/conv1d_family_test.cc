// The conv1d family's plug-in surface: name, sources, space, constraints, compile specs, block shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "kernels/conv1d/conv1d_config.h"
#include "kernels/conv1d/conv1d_family.h"

namespace dflash::conv1d {
namespace {

using tuner::Config;

tuner::Problem TokenMajorBucket() { return *Family().Bucket(MakeProblem(8192, 10240, 1, Layout::kTokenMajor)); }
tuner::Problem ChannelMajorBucket() {
  return *Family().Bucket(MakeProblem(8192, 10240, 1, Layout::kChannelMajor));
}

TEST(Conv1dFamily, NamesItselfAndEmbedsItsSourcesFreeOfHostHeaders) {
  EXPECT_EQ(Family().name(), "conv1d");
  EXPECT_FALSE(Family().summary().empty());
  std::set<std::string> names;
  for (const EmbeddedFile& f : Family().sources()) {
    names.insert(f.name);
    EXPECT_EQ(std::string(f.data).size(), f.size) << f.name;
    // Every #include of the kernel sources is another embedded file or cuda_bf16.h.
    const std::string text(f.text());
    for (std::size_t at = text.find("#include"); at != std::string::npos; at = text.find("#include", at + 1)) {
      const std::string line = text.substr(at, text.find('\n', at) - at);
      const bool ok = line.find("<cuda_bf16.h>") != std::string::npos ||
                      line.find("\"conv1d.cuh\"") != std::string::npos ||
                      line.find("\"conv1d_params.h\"") != std::string::npos;
      EXPECT_TRUE(ok) << f.name << ": " << line;
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"conv1d.cu", "conv1d.cuh", "conv1d_params.h"}));
}

TEST(Conv1dFamily, SpaceIsTheProductOfItsParams) {
  const auto params = Family().params();
  std::size_t product = 1;
  std::set<std::string> names;
  for (const auto& p : params) {
    product *= p.values.size();
    names.insert(p.name);
    EXPECT_FALSE(p.help.empty());
  }
  EXPECT_EQ(names, (std::set<std::string>{"block_c", "threads", "tpt", "vec"}));
  EXPECT_EQ(tuner::EnumerateSpace(Family()).size(), product);
}

TEST(Conv1dFamily, EachConfigServesAtMostOneLayoutAndBothLayoutsHaveMany) {
  std::size_t tm = 0, cm = 0;
  for (const Config& c : tuner::EnumerateSpace(Family())) {
    const bool t = Family().InvalidReason(c, TokenMajorBucket()).empty();
    const bool m = Family().InvalidReason(c, ChannelMajorBucket()).empty();
    EXPECT_FALSE(t && m) << tuner::ConfigLabel(c);  // LaunchConv1d relies on it
    tm += t;
    cm += m;
  }
  EXPECT_GE(tm, 50u);
  EXPECT_GE(cm, 20u);
}

TEST(Conv1dFamily, InvalidReasonStatesWhy) {
  const Config narrow{{"block_c", 4}, {"threads", 128}, {"tpt", 8}, {"vec", 8}};
  EXPECT_NE(Family().InvalidReason(narrow, TokenMajorBucket()).find("block_c >= 32"), std::string::npos);
  EXPECT_EQ(Family().InvalidReason(Config{{"block_c", 4}, {"threads", 128}, {"tpt", 8}, {"vec", 8}},
                                   ChannelMajorBucket()),
            "");
  const Config wide{{"block_c", 256}, {"threads", 256}, {"tpt", 8}, {"vec", 8}};
  EXPECT_EQ(Family().InvalidReason(wide, TokenMajorBucket()), "");
  EXPECT_NE(Family().InvalidReason(wide, ChannelMajorBucket()).find("one channel"), std::string::npos);
  const Config lanes{{"block_c", 512}, {"threads", 128}, {"tpt", 8}, {"vec", 1}};
  EXPECT_NE(Family().InvalidReason(lanes, TokenMajorBucket()).find("do not tile"), std::string::npos);
  const Config split{{"block_c", 1}, {"threads", 128}, {"tpt", 4}, {"vec", 8}};
  EXPECT_NE(Family().InvalidReason(split, ChannelMajorBucket()).find("tpt=4 is not a multiple of vec=8"),
            std::string::npos);
  // channels not a multiple of vec: the vector path could never run.
  const auto odd = *Family().Bucket(MakeProblem(8192, 10241, 1, Layout::kTokenMajor));
  EXPECT_NE(Family().InvalidReason(wide, odd).find("never vectorizes"), std::string::npos);
  EXPECT_EQ(Family().InvalidReason(Config{{"block_c", 256}, {"threads", 256}, {"tpt", 8}, {"vec", 1}}, odd), "");
  // Malformed configs and buckets.
  EXPECT_NE(Family().InvalidReason(Config{{"block_c", 256}}, TokenMajorBucket()).find("missing"),
            std::string::npos);
  Config extra = wide;
  extra["bogus"] = 1;
  EXPECT_NE(Family().InvalidReason(extra, TokenMajorBucket()), "");
  Config off = wide;
  off["tpt"] = 5;
  EXPECT_NE(Family().InvalidReason(off, TokenMajorBucket()).find("not a value"), std::string::npos);
  EXPECT_NE(Family().InvalidReason(wide, tuner::Problem{{"tokens", 1}}).find("not a conv1d bucket"),
            std::string::npos);
}

TEST(Conv1dFamily, CompileSpecInstantiatesTheLayoutsKernelFromTheMainFile) {
  const Config wide{{"block_c", 256}, {"threads", 256}, {"tpt", 8}, {"vec", 8}};
  const tuner::CompileSpec spec = Family().MakeCompileSpec(wide, TokenMajorBucket());
  EXPECT_EQ(spec.main_file, "conv1d.cu");
  ASSERT_EQ(spec.name_expressions.size(), 1u);
  EXPECT_EQ(spec.name_expressions[0], "dflash_conv1d::conv1d_fwd_token_major<256, 8, 8, 256>");
  const Config tall{{"block_c", 4}, {"threads", 128}, {"tpt", 16}, {"vec", 8}};
  EXPECT_EQ(Family().MakeCompileSpec(tall, ChannelMajorBucket()).name_expressions[0],
            "dflash_conv1d::conv1d_fwd_channel_major<4, 8, 16, 128>");
  bool main_embedded = false;
  for (const EmbeddedFile& f : Family().sources()) main_embedded |= spec.main_file == f.name;
  EXPECT_TRUE(main_embedded);
  // Every config gets a distinct spec (the cache key hashes it).
  std::set<std::string> exprs;
  for (const Config& c : tuner::EnumerateSpace(Family()))
    exprs.insert(Family().MakeCompileSpec(c, TokenMajorBucket()).name_expressions.at(0));
  EXPECT_EQ(exprs.size(), tuner::EnumerateSpace(Family()).size());
}

TEST(Conv1dFamily, BlockShapeIsTheThreadsParamWithoutDynamicSharedMemory) {
  const Config c{{"block_c", 128}, {"threads", 128}, {"tpt", 4}, {"vec", 4}};
  const auto shape = Family().BlockShapeOf(c, TokenMajorBucket());
  EXPECT_EQ(shape.threads, 128u);
  EXPECT_EQ(shape.dynamic_shared_bytes, 0u);
}

TEST(Conv1dFamily, GeometryCoversTheBlockTile) {
  const Config c{{"block_c", 128}, {"threads", 256}, {"tpt", 8}, {"vec", 4}};
  Result<Geometry> g = GeometryOf(c, Layout::kTokenMajor);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->block_t, (256 / (128 / 4)) * 8);
  const Config m{{"block_c", 4}, {"threads", 256}, {"tpt", 16}, {"vec", 8}};
  Result<Geometry> gm = GeometryOf(m, Layout::kChannelMajor);
  ASSERT_TRUE(gm.ok()) << gm.status().ToString();
  EXPECT_EQ(gm->block_t, (256 / 4) * 16);
  EXPECT_EQ(GeometryOf(m, Layout::kTokenMajor).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace dflash::conv1d
