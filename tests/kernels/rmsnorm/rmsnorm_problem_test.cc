// Problem validation and the problem -> bucket mapping of the rmsnorm family.
#include <gtest/gtest.h>

#include <string>

#include "kernels/rmsnorm/rmsnorm_family.h"
#include "kernels/rmsnorm/rmsnorm_problem.h"

namespace dflash::rmsnorm {
namespace {

using nlohmann::json;

json BucketOk(const json& problem) {
  Result<json> b = Family().Bucket(problem);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? *b : json();
}

TEST(RmsNormBucket, RoundsRowsToPowersOfTwoFrom1024AndKeepsEveryOtherField) {
  const json b = BucketOk({{"rows", 4000}, {"cols", 5120}, {"kind", "zero_centred"}, {"residual", true}});
  EXPECT_EQ(b, (json{{"rows", 4096}, {"cols", 5120}, {"kind", "zero_centred"}, {"residual", true}, {"gate", false},
                     {"weight", "bf16"}, {"dtype", "bf16"}}));
  EXPECT_EQ(BucketOk({{"rows", 1}, {"cols", 8}, {"kind", "standard"}})["rows"], 1024);
  EXPECT_EQ(BucketOk({{"rows", 1024}, {"cols", 8}, {"kind", "standard"}})["rows"], 1024);
  EXPECT_EQ(BucketOk({{"rows", 1025}, {"cols", 8}, {"kind", "standard"}})["rows"], 2048);
  EXPECT_EQ(BucketOk({{"rows", 196608}, {"cols", 128}, {"kind", "standard"}, {"gate", true}})["rows"], 262144);
  EXPECT_EQ(BucketOk({{"rows", std::int64_t{1} << 30}, {"cols", 8}, {"kind", "standard"}})["rows"],
            std::int64_t{1} << 30);
  const json f = BucketOk({{"rows", 8192}, {"cols", 5120}, {"kind", "standard"}, {"weight", "fp32"}, {"gate", true},
                           {"dtype", "bf16"}});
  EXPECT_EQ(f["weight"], "fp32");
  EXPECT_EQ(f["gate"], true);
  EXPECT_EQ(f["residual"], false);
  EXPECT_EQ(f["kind"], "standard");
}

TEST(RmsNormBucket, IsIdempotentAndEveryProblemOfABucketMapsToIt) {
  const json b = BucketOk(MakeProblem(3000, 256, Kind::kZeroCentred));
  EXPECT_EQ(BucketOk(b), b);
  for (std::int64_t r : {2049, 3333, 4096}) EXPECT_EQ(BucketOk(MakeProblem(r, 256, Kind::kZeroCentred)), b) << r;
  // Any other field changes the bucket.
  EXPECT_NE(BucketOk(MakeProblem(3000, 264, Kind::kZeroCentred)), b);
  EXPECT_NE(BucketOk(MakeProblem(3000, 256, Kind::kStandard)), b);
  EXPECT_NE(BucketOk(MakeProblem(3000, 256, Kind::kZeroCentred, true)), b);
  EXPECT_NE(BucketOk(MakeProblem(3000, 256, Kind::kZeroCentred, false, true)), b);
  EXPECT_NE(BucketOk(MakeProblem(3000, 256, Kind::kZeroCentred, false, false, WeightDtype::kFp32)), b);
}

TEST(RmsNormBucket, MakeProblemWritesEveryFieldAndParsesBack) {
  const json p = MakeProblem(17, 128, Kind::kStandard, true, true, WeightDtype::kFp32);
  EXPECT_EQ(p, (json{{"rows", 17}, {"cols", 128}, {"kind", "standard"}, {"residual", true}, {"gate", true},
                     {"weight", "fp32"}, {"dtype", "bf16"}}));
  Result<ProblemSpec> s = ParseProblem(p);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, (ProblemSpec{17, 128, Kind::kStandard, true, true, WeightDtype::kFp32}));
  EXPECT_EQ(ToJson(*s), p);
}

void ExpectInvalid(const json& problem, const std::string& mentions) {
  Result<json> b = Family().Bucket(problem);
  ASSERT_FALSE(b.ok()) << problem.dump();
  EXPECT_EQ(b.status().code(), ErrorCode::kInvalidArgument) << problem.dump();
  EXPECT_NE(b.status().message().find(mentions), std::string::npos)
      << problem.dump() << " -> " << b.status().message();
}

TEST(RmsNormBucket, RejectsBadProblemsNamingTheField) {
  const json ok = {{"rows", 8}, {"cols", 64}, {"kind", "standard"}};
  auto with = [&](const char* key, const json& v) {
    json p = ok;
    p[key] = v;
    return p;
  };
  auto without = [&](const char* key) {
    json p = ok;
    p.erase(key);
    return p;
  };
  ExpectInvalid(json::array({1, 2}), "JSON object");
  ExpectInvalid(without("rows"), "missing field \"rows\"");
  ExpectInvalid(without("cols"), "missing field \"cols\"");
  ExpectInvalid(without("kind"), "missing field \"kind\"");
  ExpectInvalid(with("rows", 0), "\"rows\"");
  ExpectInvalid(with("rows", -3), "\"rows\"");
  ExpectInvalid(with("rows", (std::int64_t{1} << 30) + 1), "\"rows\"");
  ExpectInvalid(with("rows", "8"), "\"rows\" must be an integer");
  ExpectInvalid(with("rows", 8.5), "\"rows\" must be an integer");
  ExpectInvalid(with("cols", 0), "\"cols\"");
  ExpectInvalid(with("cols", 16392), "\"cols\"");
  ExpectInvalid(with("cols", 100), "\"cols\" = 100 is not a multiple of 8");
  ExpectInvalid(with("cols", true), "\"cols\" must be an integer");
  ExpectInvalid(with("kind", "layernorm"), "\"kind\" must be \"standard\" or \"zero_centred\"");
  ExpectInvalid(with("kind", 1), "\"kind\" must be a string");
  ExpectInvalid(with("residual", 1), "\"residual\" must be true or false");
  ExpectInvalid(with("gate", "yes"), "\"gate\" must be true or false");
  ExpectInvalid(with("weight", "fp16"), "\"weight\" must be \"bf16\" or \"fp32\"");
  ExpectInvalid(with("weight", 32), "\"weight\" must be a string");
  ExpectInvalid(with("dtype", "fp16"), "\"dtype\" must be \"bf16\"");
  ExpectInvalid(with("eps", 1e-6), "unknown field \"eps\"");
}

TEST(RmsNormBucket, AcceptsTheLimits) {
  EXPECT_TRUE(Family().Bucket({{"rows", 1}, {"cols", 8}, {"kind", "standard"}}).ok());
  EXPECT_TRUE(Family().Bucket({{"rows", 1}, {"cols", 16384}, {"kind", "zero_centred"}}).ok());
}

}  // namespace
}  // namespace dflash::rmsnorm
