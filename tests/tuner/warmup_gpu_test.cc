// GPU tests of the tuner end to end (label `gpu`; skipped without a GPU): the conv1d family tunes on the GPU and
// its winner matches the reference; a second warmup is all hits; two racing warmups publish each winner once; a
// cubin tampered with in the cache is caught at load and re-tuned.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <set>
#include <string>

#include "../cache/cache_test_util.h"
#include "cache/kernel_cache.h"
#include "cli_runner.h"
#include "kernels/conv1d/conv1d_family.h"
#include "tuner/gpu_runtime.h"
#include "tuner/kernel_provider.h"

namespace dflash {
namespace {

using testing::RunCli;
using TempDir = cache::testing::TempDir;

class WarmupGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    cache_ = tmp_.path() / "cache";
    scratch_ = (tmp_.path() / "out").string();
  }
  testing::CliResult Warmup(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> a = {"warmup", "--preset", "tiny", "--json", "--budget", "24", "--cache-dir",
                                  cache_.string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return RunCli(a, scratch_);
  }
  TempDir tmp_;
  std::filesystem::path cache_;
  std::string scratch_;
};

TEST_F(WarmupGpu, Conv1dTunesOnTheGpuAndTheCachedWinnerMatchesTheReference) {
  auto r = Warmup();
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  auto j = r.json();
  EXPECT_GE(j["winners_new"].get<int>(), 1);
  EXPECT_GT(j["benchmarked"].get<int>(), 0);
  // Load the winner the way the trainer does and check it on fresh inputs with poisoned outputs.
  auto ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok());
  cache::CacheOptions o;
  o.dir = cache_;
  auto c = cache::KernelCache::Open(o);
  ASSERT_TRUE(c.ok());
  tuner::KernelProvider provider(**c, *ctx);
  // Every size of the tuned bucket (the tiny preset: 1024 channels = 2 x 2 key heads + 4 value heads of 128, tokens
  // rounded up to 512) is served by the winner.
  for (std::int64_t tokens : {257, 300, 511, 512}) {
    auto problem = conv1d::MakeProblem(tokens, 1024);
    auto resolved = provider.Get(conv1d::Family(), problem);
    ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
    auto w = conv1d::Family().MakeWorkload(*ctx, problem, 1234 + tokens);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    auto stream = gpu::Stream::Create();
    ASSERT_TRUE(stream.ok());
    ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
    ASSERT_TRUE((*w)->Launch(*resolved->variant, stream->get()).ok());
    ASSERT_TRUE(stream->Synchronize().ok());
    Status st = (*w)->Check(stream->get());
    EXPECT_TRUE(st.ok()) << "tokens " << tokens << ": " << st.ToString();
  }
}

TEST_F(WarmupGpu, SecondIdenticalWarmupIsAPureCacheHit) {
  ASSERT_EQ(Warmup().code, 0);
  auto second = Warmup();
  ASSERT_EQ(second.code, 0) << second.err;
  auto j = second.json();
  EXPECT_EQ(j["compiled"].get<int>(), 0);
  EXPECT_EQ(j["benchmarked"].get<int>(), 0);
  EXPECT_EQ(j["winners_new"].get<int>(), 0);
  EXPECT_EQ(j["winners_cached"].get<int>(), static_cast<int>(j["keys"].size()));
}

TEST_F(WarmupGpu, TwoRacingWarmupsPublishEachWinnerOnce) {
  std::vector<std::string> a = {"warmup", "--preset", "tiny", "--json", "--budget", "24", "--cache-dir",
                                cache_.string()};
  pid_t p1 = testing::SpawnCli(a, scratch_ + "1");
  pid_t p2 = testing::SpawnCli(a, scratch_ + "2");
  ASSERT_EQ(testing::WaitExit(p1), 0) << testing::ReadText(scratch_ + "1.err");
  ASSERT_EQ(testing::WaitExit(p2), 0) << testing::ReadText(scratch_ + "2.err");
  auto j1 = nlohmann::json::parse(testing::ReadText(scratch_ + "1"));
  auto j2 = nlohmann::json::parse(testing::ReadText(scratch_ + "2"));
  // Requests of one preset can share a tuning key (problems in one bucket): each distinct key is tuned once over
  // both processes; every other request of it, in either process, is a hit.
  const int requests = static_cast<int>(j1["keys"].size());
  std::set<std::string> digests;
  for (const auto& k : j1["keys"]) digests.insert(k["key"].get<std::string>());
  const int keys = static_cast<int>(digests.size());
  EXPECT_EQ(j1["winners_new"].get<int>() + j2["winners_new"].get<int>(), keys);
  EXPECT_EQ(j1["winners_cached"].get<int>() + j2["winners_cached"].get<int>(), 2 * requests - keys);
  auto verify = RunCli({"verify-cache", "--load", "--json", "--cache-dir", cache_.string()}, scratch_);
  EXPECT_EQ(verify.code, 0) << verify.out;
  EXPECT_EQ(verify.json()["loaded"].get<int>(), keys);
}

TEST_F(WarmupGpu, TamperedCubinIsCaughtAtLoadAndRetuned) {
  ASSERT_EQ(Warmup().code, 0);
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((cache_ / "kernels.db").c_str(), &db), SQLITE_OK);
    // Flip one byte in the middle of every stored winner's cubin, leaving its recorded SHA-256 as it was.
    ASSERT_EQ(sqlite3_exec(db,
                           "UPDATE entries SET cubin = substr(cubin, 1, length(cubin)/2) || "
                           "X'5A' || substr(cubin, length(cubin)/2 + 2)",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  auto ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok());
  {
    cache::CacheOptions o;
    o.dir = cache_;
    auto c = cache::KernelCache::Open(o);
    ASSERT_TRUE(c.ok());
    tuner::KernelProvider provider(**c, *ctx);
    auto resolved = provider.Get(conv1d::Family(), conv1d::MakeProblem(512, 1024));
    ASSERT_FALSE(resolved.ok()) << "a tampered cubin must never be loaded";
    EXPECT_EQ(resolved.status().code(), ErrorCode::kNotFound);
    EXPECT_NE(resolved.status().message().find("dflash-tune warmup"), std::string::npos);
  }
  auto again = Warmup();
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_GE(again.json()["winners_new"].get<int>(), 1) << "the quarantined key is tuned again";
  EXPECT_EQ(again.json()["compiled"].get<int>(), 0) << "compiled artifacts are reused";
  auto verify = RunCli({"verify-cache", "--cache-dir", cache_.string()}, scratch_);
  EXPECT_EQ(verify.code, 0) << verify.out;
}

}  // namespace
}  // namespace dflash
