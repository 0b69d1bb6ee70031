// Problem validation and the problem -> bucket mapping of the xent family.
#include "kernels/xent/xent_problem.h"

#include <gtest/gtest.h>

#include <string>

#include "kernels/xent/xent_family.h"

namespace dflash::xent {
namespace {

using nlohmann::json;

json BucketOk(const json& problem) {
  Result<json> b = Family().Bucket(problem);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? *b : json();
}

TEST(XentBucket, RoundsRowsToPowersOfTwoFrom256AndKeepsVocabAndGrad) {
  EXPECT_EQ(BucketOk({{"rows", 2048}, {"vocab", 248320}, {"grad", true}, {"dtype", "fp32"}}),
            (json{{"rows", 2048}, {"vocab", 248320}, {"grad", true}, {"dtype", "fp32"}}));
  EXPECT_EQ(BucketOk({{"rows", 1}, {"vocab", 1024}})["rows"], 256);
  EXPECT_EQ(BucketOk({{"rows", 256}, {"vocab", 1024}})["rows"], 256);
  EXPECT_EQ(BucketOk({{"rows", 257}, {"vocab", 1024}})["rows"], 512);
  EXPECT_EQ(BucketOk({{"rows", 1500}, {"vocab", 1001}})["rows"], 2048);
  EXPECT_EQ(BucketOk({{"rows", 1500}, {"vocab", 1001}})["vocab"], 1001);
  EXPECT_EQ(BucketOk({{"rows", 3}, {"vocab", 7}, {"grad", false}})["grad"], false);
}

TEST(XentBucket, GradDefaultsToTrueAndDtypeToFp32) {
  EXPECT_EQ(BucketOk({{"rows", 8}, {"vocab", 8}}),
            (json{{"rows", 256}, {"vocab", 8}, {"grad", true}, {"dtype", "fp32"}}));
}

TEST(XentBucket, IsIdempotentAndEveryProblemOfABucketMapsToIt) {
  const json b = BucketOk(MakeProblem(1500, 248320, true));
  EXPECT_EQ(BucketOk(b), b);
  for (std::int64_t rows : {1025, 1600, 2048}) EXPECT_EQ(BucketOk(MakeProblem(rows, 248320, true)), b) << rows;
  EXPECT_NE(BucketOk(MakeProblem(1500, 248320, false)), b) << "grad is part of the key";
  EXPECT_NE(BucketOk(MakeProblem(1500, 248321, true)), b) << "vocab is exact";
}

TEST(XentBucket, MakeProblemWritesEveryField) {
  EXPECT_EQ(MakeProblem(17, 5, false), (json{{"rows", 17}, {"vocab", 5}, {"grad", false}, {"dtype", "fp32"}}));
}

void ExpectInvalid(const json& problem, const std::string& mentions) {
  Result<json> b = Family().Bucket(problem);
  ASSERT_FALSE(b.ok()) << problem.dump();
  EXPECT_EQ(b.status().code(), ErrorCode::kInvalidArgument) << problem.dump();
  EXPECT_NE(b.status().message().find(mentions), std::string::npos) << problem.dump() << " -> " << b.status().message();
}

TEST(XentBucket, RejectsBadProblemsNamingTheField) {
  ExpectInvalid(json::array({1, 2}), "JSON object");
  ExpectInvalid({{"vocab", 8}}, "\"rows\"");
  ExpectInvalid({{"rows", 8}}, "\"vocab\"");
  ExpectInvalid({{"rows", 0}, {"vocab", 8}}, "\"rows\"");
  ExpectInvalid({{"rows", -3}, {"vocab", 8}}, "\"rows\"");
  ExpectInvalid({{"rows", (std::int64_t{1} << 24) + 1}, {"vocab", 8}}, "\"rows\"");
  ExpectInvalid({{"rows", "8"}, {"vocab", 8}}, "\"rows\" must be an integer");
  ExpectInvalid({{"rows", 8}, {"vocab", 2.5}}, "\"vocab\" must be an integer");
  ExpectInvalid({{"rows", 8}, {"vocab", 0}}, "\"vocab\"");
  ExpectInvalid({{"rows", 8}, {"vocab", (std::int64_t{1} << 20) + 1}}, "\"vocab\"");
  ExpectInvalid({{"rows", 8}, {"vocab", 8}, {"grad", 1}}, "\"grad\" must be a boolean");
  ExpectInvalid({{"rows", 8}, {"vocab", 8}, {"dtype", "bf16"}}, "\"dtype\"");
  ExpectInvalid({{"rows", 8}, {"vocab", 8}, {"dtype", 32}}, "\"dtype\"");
  ExpectInvalid({{"rows", 8}, {"vocab", 8}, {"vocabulary", 8}}, "unknown field \"vocabulary\"");
}

}  // namespace
}  // namespace dflash::xent
