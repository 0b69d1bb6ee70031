// Config JSON round trips, labels, space enumeration and variant function lookup.
#include <gtest/gtest.h>

#include <set>

#include "tuner/kernel_family.h"
#include "tuner/tuning_key.h"

namespace dflash::tuner {
namespace {

TEST(ConfigJson, IsCanonicalSortedWithoutSpaces) {
  Config c{{"zeta", 3}, {"alpha", -1}, {"mid", 1LL << 40}};
  EXPECT_EQ(ConfigToJson(c), R"({"alpha":-1,"mid":1099511627776,"zeta":3})");
  EXPECT_EQ(ConfigToJson(Config{}), "{}");
}

TEST(ConfigJson, RoundTripsAnyConfig) {
  Config c{{"block_c", 128}, {"warps", 4}, {"neg", -7}, {"big", INT64_MAX}, {"small", INT64_MIN}};
  Result<Config> back = ConfigFromJson(ConfigToJson(c));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, c);
}

TEST(ConfigJson, AcceptsWhitespaceAndAnyKeyOrder) {
  Result<Config> c = ConfigFromJson(" { \"b\" : 2 ,\n \"a\": 1 } ");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*c, (Config{{"a", 1}, {"b", 2}}));
}

TEST(ConfigJson, RejectsMalformedInputWithInvalidArgument) {
  for (const char* bad : {"", "{", "[1,2]", "3", R"({"a":1.5})", R"({"a":"1"})", R"({"a":true})",
                          R"({"a":null})", R"({"a":[1]})", R"({"a":18446744073709551615})", R"({"":1})",
                          R"({"a":1} trailing)"}) {
    Result<Config> c = ConfigFromJson(bad);
    ASSERT_FALSE(c.ok()) << "accepted: " << bad;
    EXPECT_EQ(c.status().code(), ErrorCode::kInvalidArgument) << bad;
  }
}

TEST(ConfigLabel, ListsSortedPairs) {
  EXPECT_EQ(ConfigLabel(Config{{"warps", 4}, {"block_c", 128}}), "block_c=128,warps=4");
  EXPECT_EQ(ConfigLabel(Config{}), "");
}

// A family whose only meaningful part is its parameter list.
class ParamsOnlyFamily : public KernelFamily {
 public:
  explicit ParamsOnlyFamily(std::vector<TunableParam> params) : params_(std::move(params)) {}
  std::string_view name() const override { return "params_only"; }
  std::string_view summary() const override { return "test family"; }
  std::span<const EmbeddedFile> sources() const override { return {}; }
  std::vector<TunableParam> params() const override { return params_; }
  Result<Problem> Bucket(const Problem& p) const override { return p; }
  std::string InvalidReason(const Config&, const Problem&) const override { return {}; }
  CompileSpec MakeCompileSpec(const Config&, const Problem&) const override { return {}; }
  BlockShape BlockShapeOf(const Config&, const Problem&) const override { return {}; }
  Result<std::unique_ptr<Workload>> MakeWorkload(const gpu::Context&, const Problem&,
                                                 std::uint64_t) const override {
    return Unsupported("no workloads in this test");
  }

 private:
  std::vector<TunableParam> params_;
};

TEST(TuningKey, ChangesWithTheTuningSpaceOnly) {
  const Problem bucket = {{"n", 64}};
  auto key = [&](std::vector<TunableParam> params) {
    return MakeTuningKey(ParamsOnlyFamily(std::move(params)), bucket, "sm_90");
  };
  const cache::TuningKey base = key({{"a", {1, 2}, ""}, {"b", {10}, ""}});
  EXPECT_EQ(key({{"a", {1, 2}, "other help text"}, {"b", {10}, ""}}).Digest(), base.Digest());
  // A new parameter (a cached winner would lack it), a new value, a renamed parameter: another key.
  EXPECT_NE(key({{"a", {1, 2}, ""}, {"b", {10}, ""}, {"c", {0, 64}, ""}}).Digest(), base.Digest());
  EXPECT_NE(key({{"a", {1, 2, 3}, ""}, {"b", {10}, ""}}).Digest(), base.Digest());
  EXPECT_NE(key({{"a", {1, 2}, ""}, {"bb", {10}, ""}}).Digest(), base.Digest());
  EXPECT_NE(key({{"a", {1}, ""}, {"b", {2, 10}, ""}}).Digest(), base.Digest()) << "values belong to their name";
  EXPECT_EQ(base.signature, R"({"n":64})");
}

TEST(EnumerateSpace, IsTheCartesianProductInOdometerOrder) {
  ParamsOnlyFamily f({{"a", {1, 2}, ""}, {"b", {10, 20, 30}, ""}, {"c", {7}, ""}});
  std::vector<Config> space = EnumerateSpace(f);
  ASSERT_EQ(space.size(), 6u);
  std::vector<std::string> labels;
  for (const Config& c : space) labels.push_back(ConfigLabel(c));
  EXPECT_EQ(labels, (std::vector<std::string>{"a=1,b=10,c=7", "a=1,b=20,c=7", "a=1,b=30,c=7", "a=2,b=10,c=7",
                                              "a=2,b=20,c=7", "a=2,b=30,c=7"}));
  std::set<Config> unique(space.begin(), space.end());
  EXPECT_EQ(unique.size(), space.size());
  EXPECT_EQ(EnumerateSpace(f), space) << "order must be deterministic";
}

TEST(EnumerateSpace, NoParamsIsOneEmptyConfigAndAnEmptyParamIsAnEmptySpace) {
  ParamsOnlyFamily none({});
  ASSERT_EQ(EnumerateSpace(none).size(), 1u);
  EXPECT_TRUE(EnumerateSpace(none)[0].empty());
  ParamsOnlyFamily empty({{"a", {1, 2}, ""}, {"b", {}, ""}});
  EXPECT_TRUE(EnumerateSpace(empty).empty());
}

TEST(EnumerateSpace, CoversEveryPointOfALargerSpace) {
  ParamsOnlyFamily f({{"w", {1, 2, 4, 8}, ""}, {"x", {16, 32, 64}, ""}, {"y", {0, 1}, ""}, {"z", {3, 5, 9, 11, 13}, ""}});
  std::vector<Config> space = EnumerateSpace(f);
  EXPECT_EQ(space.size(), 4u * 3u * 2u * 5u);
  EXPECT_EQ(std::set<Config>(space.begin(), space.end()).size(), space.size());
  EXPECT_EQ(space.front(), (Config{{"w", 1}, {"x", 16}, {"y", 0}, {"z", 3}}));
  EXPECT_EQ(space.back(), (Config{{"w", 8}, {"x", 64}, {"y", 1}, {"z", 13}}));
}

TEST(LoadedVariant, FunctionOfAnUnknownExpressionIsNotFoundNamingExpressionAndLabel) {
  LoadedVariant v;
  v.label = "conv1d[block_c=128]";
  CUfunction fake = reinterpret_cast<CUfunction>(0x1234);
  v.functions["conv1d_fwd<128, 4>"] = fake;
  Result<CUfunction> hit = v.Function("conv1d_fwd<128, 4>");
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(*hit, fake);
  Result<CUfunction> miss = v.Function("conv1d_bwd<128, 4>");
  ASSERT_FALSE(miss.ok());
  EXPECT_EQ(miss.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(miss.status().message().find("conv1d_bwd<128, 4>"), std::string::npos);
  EXPECT_NE(miss.status().message().find("conv1d[block_c=128]"), std::string::npos);
}

}  // namespace
}  // namespace dflash::tuner
