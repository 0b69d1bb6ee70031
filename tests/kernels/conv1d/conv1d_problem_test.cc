// Problem validation and the problem -> bucket mapping of the conv1d family.
#include <gtest/gtest.h>

#include <string>

#include "kernels/conv1d/conv1d_family.h"
#include "kernels/conv1d/conv1d_problem.h"

namespace dflash::conv1d {
namespace {

using nlohmann::json;

json BucketOk(const json& problem) {
  Result<json> b = Family().Bucket(problem);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? *b : json();
}

TEST(Conv1dBucket, RoundsTokensToPowersOfTwoFrom256AndKeepsChannels) {
  const json b = BucketOk({{"tokens", 1000}, {"channels", 10240}});
  EXPECT_EQ(b, (json{{"tokens", 1024}, {"channels", 10240}, {"num_seqs", 1}, {"layout", "token_major"},
                     {"dtype", "bf16"}}));
  EXPECT_EQ(BucketOk({{"tokens", 1}, {"channels", 7}})["tokens"], 256);
  EXPECT_EQ(BucketOk({{"tokens", 256}, {"channels", 7}})["tokens"], 256);
  EXPECT_EQ(BucketOk({{"tokens", 257}, {"channels", 7}})["tokens"], 512);
  EXPECT_EQ(BucketOk({{"tokens", 8192}, {"channels", 4097}})["channels"], 4097);
  EXPECT_EQ(BucketOk({{"tokens", 8193}, {"channels", 4097}})["tokens"], 16384);
}

TEST(Conv1dBucket, RoundsNumSeqsToPowersOfTwoAndKeepsLayout) {
  const json b = BucketOk({{"tokens", 300}, {"channels", 64}, {"num_seqs", 3}, {"layout", "channel_major"},
                           {"dtype", "bf16"}});
  EXPECT_EQ(b["num_seqs"], 4);
  EXPECT_EQ(b["layout"], "channel_major");
  EXPECT_EQ(BucketOk({{"tokens", 300}, {"channels", 64}, {"num_seqs", 1}})["num_seqs"], 1);
  EXPECT_EQ(BucketOk({{"tokens", 300}, {"channels", 64}, {"num_seqs", 300}})["num_seqs"], 512);
}

TEST(Conv1dBucket, IsIdempotentAndEveryProblemOfABucketMapsToIt) {
  const json b = BucketOk(MakeProblem(5000, 10240, 9, Layout::kTokenMajor));
  EXPECT_EQ(BucketOk(b), b);
  for (std::int64_t t : {4097, 6000, 8192})
    EXPECT_EQ(BucketOk(MakeProblem(t, 10240, 16, Layout::kTokenMajor)), b) << t;
}

TEST(Conv1dBucket, MakeProblemWritesEveryField) {
  EXPECT_EQ(MakeProblem(17, 5, 2, Layout::kChannelMajor),
            (json{{"tokens", 17}, {"channels", 5}, {"num_seqs", 2}, {"layout", "channel_major"}, {"dtype", "bf16"}}));
}

void ExpectInvalid(const json& problem, const std::string& mentions) {
  Result<json> b = Family().Bucket(problem);
  ASSERT_FALSE(b.ok()) << problem.dump();
  EXPECT_EQ(b.status().code(), ErrorCode::kInvalidArgument) << problem.dump();
  EXPECT_NE(b.status().message().find(mentions), std::string::npos)
      << problem.dump() << " -> " << b.status().message();
}

TEST(Conv1dBucket, RejectsBadProblemsNamingTheField) {
  ExpectInvalid(json::array({1, 2}), "JSON object");
  ExpectInvalid({{"channels", 8}}, "\"tokens\"");
  ExpectInvalid({{"tokens", 8}}, "\"channels\"");
  ExpectInvalid({{"tokens", 0}, {"channels", 8}}, "\"tokens\"");
  ExpectInvalid({{"tokens", -5}, {"channels", 8}}, "\"tokens\"");
  ExpectInvalid({{"tokens", "8"}, {"channels", 8}}, "\"tokens\" must be an integer");
  ExpectInvalid({{"tokens", 8.5}, {"channels", 8}}, "\"tokens\" must be an integer");
  ExpectInvalid({{"tokens", (std::int64_t{1} << 30) + 1}, {"channels", 8}}, "\"tokens\"");
  ExpectInvalid({{"tokens", 8}, {"channels", 0}}, "\"channels\"");
  ExpectInvalid({{"tokens", 8}, {"channels", 65536}}, "\"channels\"");
  ExpectInvalid({{"tokens", 8}, {"channels", 8}, {"num_seqs", 0}}, "\"num_seqs\"");
  ExpectInvalid({{"tokens", 8}, {"channels", 8}, {"num_seqs", 9}}, "\"num_seqs\"");
  ExpectInvalid({{"tokens", 8}, {"channels", 8}, {"layout", "nhwc"}}, "\"layout\"");
  ExpectInvalid({{"tokens", 8}, {"channels", 8}, {"layout", 1}}, "\"layout\"");
  ExpectInvalid({{"tokens", 8}, {"channels", 8}, {"dtype", "fp16"}}, "\"dtype\"");
  ExpectInvalid({{"tokens", 8}, {"channels", 8}, {"tokenz", 8}}, "unknown field \"tokenz\"");
}

}  // namespace
}  // namespace dflash::conv1d
