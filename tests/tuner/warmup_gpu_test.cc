// GPU tests of the tuner end to end (label `gpu`; skipped without a GPU): the conv1d family tunes on the GPU and
// its winner matches the reference; a second warmup is all hits; two racing warmups publish each winner once; a
// cubin tampered with in the cache is caught at load and re-tuned; a variant whose first (checked) launch never
// finishes is recorded as a timeout instead of hanging the warmup, and the warmup CLI ends on such a GPU.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <thread>

#include "../cache/cache_test_util.h"
#include "cache/kernel_cache.h"
#include "cli_runner.h"
#include "kernels/conv1d/conv1d_family.h"
#include "tuner/gpu_runtime.h"
#include "tuner/kernel_provider.h"
#include "tuner/tuner.h"
#include "tuner/tuning_key.h"

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

// The final round (tuner/final_round.h) ran for every key: the stored winner's time is the median of its rounds
// (3 measurements of 25 launches or more each) and no other finalist's final time is lower.
TEST_F(WarmupGpu, EveryWinnerIsSettledByTheFinalRound) {
  auto r = Warmup({"--final-rounds", "3"});
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  cache::CacheOptions o;
  o.dir = cache_;
  auto c = cache::KernelCache::Open(o);
  ASSERT_TRUE(c.ok());
  auto entries = (*c)->AllEntries();
  ASSERT_TRUE(entries.ok());
  ASSERT_FALSE(entries->empty());
  const int final_reps = 3 * tuner::BenchOptions{}.repetitions;
  for (const cache::Entry& e : *entries) {
    EXPECT_GE(e.timing.repetitions, final_reps) << e.key.ReadableName();
    auto rows = (*c)->Candidates(e.key.Digest());
    ASSERT_TRUE(rows.ok());
    bool winner_row = false;
    for (const cache::CandidateResult& row : *rows) {
      if (row.outcome != cache::Outcome::kOk || row.timing.repetitions < final_reps) continue;  // not a finalist
      EXPECT_GE(row.timing.median_ms, e.timing.median_ms) << e.key.ReadableName() << " " << row.config;
      if (row.config == e.config) winner_row = row.timing.median_ms == e.timing.median_ms;
    }
    EXPECT_TRUE(winner_row) << e.key.ReadableName() << ": the winner's row does not carry its final time";
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

TEST_F(WarmupGpu, ATimedOutCandidateEndsTheWarmupOnItsGpuAndIsSkippedNextTime) {
  // Two keys whose kernels take far longer than 1 us: the first candidate's checked launch times out.
  const std::vector<std::string> problems = {"--problem", R"(conv1d={"tokens":32768,"channels":10240})",
                                             "--problem", R"(conv1d={"tokens":16384,"channels":10240})"};
  std::vector<std::string> args = {"warmup", "--json", "--cache-dir", cache_.string(), "--budget", "4", "--seed", "1"};
  args.insert(args.end(), problems.begin(), problems.end());
  std::vector<std::string> short_timeout = args;
  short_timeout.insert(short_timeout.end(), {"--timeout-ms", "0.001"});
  auto r = RunCli(short_timeout, scratch_);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("still run a kernel that timed out"), std::string::npos) << r.err;
  auto j = r.json();
  ASSERT_TRUE(j.is_object()) << r.out << r.err;
  ASSERT_EQ(j["keys"].size(), 2u) << r.out;
  EXPECT_NE(j["keys"][0]["error"].get<std::string>().find("did not finish within"), std::string::npos) << r.out;
  EXPECT_NE(j["keys"][1]["error"].get<std::string>().find("not tuned"), std::string::npos)
      << "the busy GPU took no more keys: " << r.out;
  // Again with the default timeout: both keys tune, and the timed-out variant keeps its record (a failure is never
  // retried for the key: measured again, its row would read "ok").
  auto again = RunCli(args, scratch_);
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.json()["winners_new"].get<int>(), 2) << again.out;
  cache::CacheOptions o;
  o.dir = cache_;
  auto c = cache::KernelCache::Open(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto rows = (*c)->Candidates(again.json()["keys"][0]["key"].get<std::string>());
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(std::count_if(rows->begin(), rows->end(),
                          [](const cache::CandidateResult& r) { return r.outcome == cache::Outcome::kTimeout; }),
            1)
      << again.out;
}

constexpr char kSpinSource[] = R"cuda(
// Busy-waits `ns` nanoseconds of GPU time: a kernel that outlives the tuner's timeout.
__global__ void spin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
)cuda";
const EmbeddedFile kSpinFiles[] = {{"spin.cu", kSpinSource, sizeof(kSpinSource) - 1}};

// A family of one variant that spins for `ms` milliseconds: what a deadlocked kernel looks like to the tuner.
class SpinFamily : public tuner::KernelFamily {
 public:
  explicit SpinFamily(std::int64_t ms) : ms_(ms) {}
  std::string_view name() const override { return "spin_test"; }
  std::string_view summary() const override { return "test family: a kernel that outlives the timeout"; }
  std::span<const EmbeddedFile> sources() const override { return kSpinFiles; }
  std::vector<tuner::TunableParam> params() const override { return {{"ms", {ms_}, "spin time"}}; }
  Result<tuner::Problem> Bucket(const tuner::Problem& p) const override { return p; }
  std::string InvalidReason(const tuner::Config&, const tuner::Problem&) const override { return {}; }
  tuner::CompileSpec MakeCompileSpec(const tuner::Config&, const tuner::Problem&) const override {
    return {"spin.cu", {}, {"spin"}, {}};
  }
  BlockShape BlockShapeOf(const tuner::Config&, const tuner::Problem&) const override { return {32, 0}; }
  Result<std::unique_ptr<tuner::Workload>> MakeWorkload(const gpu::Context&, const tuner::Problem&,
                                                        std::uint64_t) const override {
    return std::unique_ptr<tuner::Workload>(new SpinWorkload(ms_));
  }

 private:
  class SpinWorkload : public tuner::Workload {
   public:
    explicit SpinWorkload(std::int64_t ms) : ns_(static_cast<unsigned long long>(ms) * 1'000'000ull) {}
    Status PoisonOutputs(CUstream) override { return Status::Ok(); }
    Status Launch(const tuner::LoadedVariant& v, CUstream s) override {
      DFLASH_ASSIGN_OR_RETURN(CUfunction f, v.Function("spin"));
      void* args[] = {&ns_};
      return gpu::Launch(f, {1}, {32}, 0, s, args, v.label);
    }
    Status Check(CUstream) override { return Status::Ok(); }
    std::size_t BytesTouched() const override { return 0; }

   private:
    unsigned long long ns_;
  };
  std::int64_t ms_;
};

TEST(TunerGpu, AVariantWhoseCheckedLaunchNeverEndsIsRecordedAsATimeoutInsteadOfHanging) {
  if (gpu::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  auto ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  TempDir tmp;
  cache::CacheOptions o;
  o.dir = tmp.path() / "cache";
  auto c = cache::KernelCache::Open(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  tuner::ThreadPool pool(1);
  tuner::Tuner key_tuner(**c, &*ctx, pool);
  constexpr std::int64_t kSpinMs = 4000;
  SpinFamily family(kSpinMs);
  tuner::TuneOptions options;
  options.arch = ctx->info().arch();
  options.bench.timeout_ms = 200;
  const tuner::Problem problem = {{"n", 1}};
  options.compile_only = true;  // the compile first, so that the timed call below is the launch alone
  ASSERT_TRUE(key_tuner.Tune(family, problem, options).ok());
  options.compile_only = false;
  const auto t0 = std::chrono::steady_clock::now();
  auto report = key_tuner.Tune(family, problem, options);
  const auto waited = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(report.ok()) << "the only variant never finished inside the timeout";
  EXPECT_EQ(report.status().code(), ErrorCode::kTimeout) << report.status().ToString();
  EXPECT_NE(report.status().message().find("check launch"), std::string::npos) << report.status().ToString();
  EXPECT_LT(waited, std::chrono::milliseconds(kSpinMs / 2)) << "Tune waited for the kernel instead of timing out";
  auto results = (*c)->Candidates(tuner::MakeTuningKey(family, problem, options.arch).Digest());
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  ASSERT_EQ(results->size(), 1u);
  EXPECT_EQ(results->front().outcome, cache::Outcome::kTimeout) << "recorded, so the next warmup skips it";
  std::this_thread::sleep_for(std::chrono::milliseconds(kSpinMs));  // the kernel ends; the context is usable again
}

}  // namespace
}  // namespace dflash
