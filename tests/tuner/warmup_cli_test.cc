// Process-level tests of `dflash-tune warmup` and the cache CLI on a machine without a GPU: compile-only warmups
// of every registered family, their JSON counts, concurrent warmups with one killed midway, and the documented
// exit codes for damaged caches and bad input.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "../cache/cache_test_util.h"
#include "cache/kernel_cache.h"
#include "cli_runner.h"
#include "tuner/gpu_runtime.h"

namespace dflash {
namespace {

using testing::RunCli;
using testing::SpawnCli;
using testing::WaitExit;
using TempDir = cache::testing::TempDir;

std::vector<std::string> Args(std::vector<std::string> v, const std::filesystem::path& cache) {
  v.push_back("--cache-dir");
  v.push_back(cache.string());
  return v;
}

// The whole tiny preset for sm_120 (the arch CI warms): every family's variants compiled through the warmup
// path, pruned or kept, and a second run that only reuses; sm_90 takes one small key through the same path (that
// every variant of every family also compiles for sm_90 is the families' own compile tests', tests/kernels/*: run
// here again it doubled this suite's 24 CPU-minutes for no new failure it could find).
TEST(WarmupCli, CompileOnlyWarmupCoversEveryFamilyForSm120AndTheSecondRunOnlyReuses) {
  TempDir tmp;
  const auto cache = tmp.path() / "cache";
  const std::string scratch = (tmp.path() / "out").string();
  auto fams = RunCli({"families", "--json"}, scratch);
  ASSERT_EQ(fams.code, 0) << fams.err;
  std::set<std::string> families;
  for (const auto& f : fams.json()) families.insert(f["family"].get<std::string>());
  ASSERT_FALSE(families.empty());
  for (const std::string arch : {"sm_90", "sm_120"}) {
    const bool whole_preset = arch == "sm_120";
    const std::vector<std::string> what =
        whole_preset ? std::vector<std::string>{"--preset", "tiny"}
                     : std::vector<std::string>{"--problem", R"(swiglu={"rows":4096,"cols":1024})"};
    std::vector<std::string> warmup = {"warmup", "--arch", arch, "--compile-only", "--json"};
    warmup.insert(warmup.end(), what.begin(), what.end());
    auto first = RunCli(Args(warmup, cache), scratch);
    ASSERT_EQ(first.code, 0) << first.err << first.out;
    const auto j = first.json();
    ASSERT_FALSE(j.is_discarded()) << first.out;
    EXPECT_EQ(j["arch"], arch);
    EXPECT_GT(j["compiled"].get<int>(), 0);
    EXPECT_EQ(j["benchmarked"].get<int>(), 0);
    EXPECT_EQ(j["failed"].get<int>(), 0) << "a variant of the space does not compile";
    EXPECT_EQ(j["winners_new"].get<int>(), 0);
    std::set<std::string> covered;
    int accounted = 0, variants = 0;
    for (const auto& k : j["keys"]) {
      covered.insert(k["family"].get<std::string>());
      EXPECT_EQ(k["status"], "compiled-only") << k.dump();
      accounted += k["compiled"].get<int>() + k["reused"].get<int>() + k["invalid"].get<int>();
      variants += k["variants"].get<int>();
    }
    if (whole_preset) {
      EXPECT_EQ(covered, families) << "the tiny preset must exercise every registered family";
    }
    EXPECT_EQ(accounted, variants) << "every variant is compiled, found compiled, or rejected before compiling";
    auto second = RunCli(Args(warmup, cache), scratch);
    ASSERT_EQ(second.code, 0) << second.err;
    EXPECT_EQ(second.json()["compiled"].get<int>(), 0);
    EXPECT_EQ(second.json()["reused"].get<int>(), j["compiled"].get<int>() + j["reused"].get<int>());
  }
  auto verify = RunCli(Args({"verify-cache", "--json"}, cache), scratch);
  EXPECT_EQ(verify.code, 0) << verify.out << verify.err;
  EXPECT_TRUE(verify.json()["ok"].get<bool>());
}

std::vector<std::pair<pid_t, std::string>> ReadTrace(const std::string& path) {
  std::vector<std::pair<pid_t, std::string>> out;
  std::istringstream in(testing::ReadText(path));
  pid_t pid;
  std::string digest;
  while (in >> pid >> digest) out.emplace_back(pid, digest);
  return out;
}

// One family's problem (a conv1d key of 512 channels: 108 variants to compile) is work enough for four racing
// processes and a kill midway; the whole preset is the test above's.
const char* kRaceProblem = R"(conv1d={"tokens":512,"channels":512})";

TEST(WarmupCli, FourConcurrentWarmupsWithOneKilledMidwayCompileNothingTwice) {
  TempDir tmp;
  const auto cache = tmp.path() / "cache";
  const std::string trace = (tmp.path() / "compile.trace").string();
  const std::vector<std::string> env = {"DFLASH_COMPILE_TRACE=" + trace};
  std::vector<pid_t> pids;
  for (int i = 0; i < 4; ++i) {
    pids.push_back(SpawnCli(Args({"warmup", "--arch", "sm_120", "--problem", kRaceProblem, "--compile-only", "--jobs",
                                  "1", "--json"},
                                 cache),
                            (tmp.path() / ("out" + std::to_string(i))).string(), env));
  }
  // Kill warmup 0 midway: once the four of them have committed a few artifacts between them AND warmup 0 has
  // committed at least one (waiting for the total alone made the test flaky: with 4 racing processes the first 6
  // commits can all come from the other three when warmup 0 drew slow variants first).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  auto killed_has_committed = [&](const std::vector<std::pair<pid_t, std::string>>& lines) {
    return std::any_of(lines.begin(), lines.end(), [&](const auto& line) { return line.first == pids[0]; });
  };
  for (auto lines = ReadTrace(trace); (lines.size() < 6 || !killed_has_committed(lines)) &&
                                      std::chrono::steady_clock::now() < deadline;
       lines = ReadTrace(trace)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pids[0], SIGKILL);
  EXPECT_EQ(WaitExit(pids[0]), 128 + SIGKILL);
  int survivors_compiled = 0;
  for (int i = 1; i < 4; ++i) {
    ASSERT_EQ(WaitExit(pids[i]), 0) << testing::ReadText((tmp.path() / ("out" + std::to_string(i) + ".err")).string());
    auto j = nlohmann::json::parse(testing::ReadText((tmp.path() / ("out" + std::to_string(i))).string()));
    EXPECT_EQ(j["errors"].get<int>(), 0);
    survivors_compiled += j["compiled"].get<int>();
  }
  const auto lines = ReadTrace(trace);
  std::map<std::string, int> times;
  int killed_committed = 0;
  for (const auto& [pid, digest] : lines) {
    ++times[digest];
    if (pid == pids[0]) ++killed_committed;
  }
  for (const auto& [digest, n] : times) EXPECT_EQ(n, 1) << "artifact " << digest << " compiled " << n << " times";
  const std::string scratch = (tmp.path() / "s").string();
  auto stats = RunCli(Args({"stats", "--json"}, cache), scratch);
  ASSERT_EQ(stats.code, 0) << stats.err;
  const int artifacts = stats.json()["artifacts"].get<int>();
  // The killed process may have died between its commit and its trace line: at most one commit unaccounted.
  EXPECT_GE(artifacts, survivors_compiled + killed_committed);
  EXPECT_LE(artifacts, survivors_compiled + killed_committed + 1);
  EXPECT_GT(killed_committed, 0) << "the killed warmup should have committed work before it died";
  auto verify = RunCli(Args({"verify-cache"}, cache), scratch);
  EXPECT_EQ(verify.code, 0) << verify.out << verify.err;
  // Everything is compiled now: a fifth warmup compiles nothing.
  auto fifth = RunCli(
      Args({"warmup", "--arch", "sm_120", "--problem", kRaceProblem, "--compile-only", "--json"}, cache), scratch);
  ASSERT_EQ(fifth.code, 0);
  EXPECT_EQ(fifth.json()["compiled"].get<int>(), 0);
}

class CacheCliExitCodes : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_ = tmp_.path() / "cache";
    scratch_ = (tmp_.path() / "out").string();
  }
  testing::CliResult Run(std::initializer_list<std::string> a) { return RunCli(Args(a, cache_), scratch_); }
  // A cache with a few real entries: publishes through the library's own path.
  void MakeCacheWithEntries() {
    cache::CacheOptions o;
    o.dir = cache_;
    auto c = cache::KernelCache::Open(o);
    ASSERT_TRUE(c.ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*c)->Publish(cache::testing::EntryFor(i, "sm_120", 8192)).ok());
  }
  static int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }
  TempDir tmp_;
  std::filesystem::path cache_;
  std::string scratch_;
};

TEST_F(CacheCliExitCodes, HealthyCacheVerifiesWithExitZero) {
  MakeCacheWithEntries();
  auto r = Run({"verify-cache"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  auto list = Run({"list", "--json"});
  ASSERT_EQ(list.code, 0);
  EXPECT_EQ(list.json().size(), 3u);
  const std::string digest = list.json()[0]["entry"];
  auto show = Run({"show", digest.substr(0, 10), "--json"});
  EXPECT_EQ(show.code, 0) << show.err;
  EXPECT_EQ(show.json()["key_digest"], digest);
}

TEST_F(CacheCliExitCodes, DamagedEntryGivesExitOneAndRepairMakesItClean) {
  MakeCacheWithEntries();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((cache_ / "kernels.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "UPDATE entries SET config = '{\"x\":1}' WHERE rowid = 2", nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  auto r = Run({"verify-cache", "--json"});
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.json()["problems"].size(), 1u);
  auto repaired = Run({"verify-cache", "--repair"});
  EXPECT_EQ(repaired.code, 1) << "the run that found damage still reports it";
  auto clean = Run({"verify-cache"});
  EXPECT_EQ(clean.code, 0) << clean.out;
  auto stats = Run({"stats", "--json"});
  EXPECT_EQ(stats.json()["entries"].get<int>(), 2);
  EXPECT_EQ(stats.json()["quarantined_rows"].get<int>(), 1);
}

TEST_F(CacheCliExitCodes, GarbageTruncatedNewerOrMissingCacheGivesExitTwoAndOneLine) {
  // Missing.
  auto missing = Run({"verify-cache"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_EQ(Lines(missing.err), 1) << missing.err;
  // Garbage.
  std::filesystem::create_directories(cache_);
  {
    std::ofstream f(cache_ / "kernels.db", std::ios::binary);
    for (int i = 0; i < 5000; ++i) f.put(static_cast<char>((i * 31) % 256));
  }
  auto garbage = Run({"verify-cache"});
  EXPECT_EQ(garbage.code, 2);
  EXPECT_EQ(Lines(garbage.err), 1) << garbage.err;
  EXPECT_NE(garbage.err.find("not a dflash-tune cache"), std::string::npos) << garbage.err;
  std::filesystem::remove_all(cache_);
  // Truncated.
  MakeCacheWithEntries();
  std::filesystem::resize_file(cache_ / "kernels.db", std::filesystem::file_size(cache_ / "kernels.db") / 2 + 7);
  auto truncated = Run({"verify-cache"});
  EXPECT_EQ(truncated.code, 2);
  EXPECT_NE(truncated.err.find("truncated"), std::string::npos) << truncated.err;
  std::filesystem::remove_all(cache_);
  // Newer schema.
  MakeCacheWithEntries();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((cache_ / "kernels.db").c_str(), &db), SQLITE_OK);
    sqlite3_exec(db, "PRAGMA user_version = 42", nullptr, nullptr, nullptr);
    sqlite3_close(db);
  }
  auto newer = Run({"verify-cache"});
  EXPECT_EQ(newer.code, 2);
  EXPECT_NE(newer.err.find("newer"), std::string::npos) << newer.err;
}

// A zeroed leaf page of the entries table (found through dbstat): list and export still work, verify reports
// the damage (exit 1), --repair salvages and the next verify is clean. A database whose schema page is zeroed
// cannot be opened: one line naming the cache directory, what is wrong and what to do, and no SQL; SQLite's own
// text only with --verbose.
TEST_F(CacheCliExitCodes, DamagedPagesLeaveEveryCommandWorkingAndErrorsSpeakNoSql) {
  {
    cache::CacheOptions o;
    o.dir = cache_;
    auto c = cache::KernelCache::Open(o);
    ASSERT_TRUE(c.ok());
    for (int i = 0; i < 30; ++i) ASSERT_TRUE((*c)->Publish(cache::testing::EntryFor(i, "sm_120", 150000)).ok());
  }
  const auto db_path = cache_ / "kernels.db";
  auto zero_page = [&](const std::string& where) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_stmt* s = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, ("SELECT pageno, (SELECT page_size FROM pragma_page_size) FROM dbstat WHERE " +
                                      where).c_str(), -1, &s, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
    const std::int64_t page = sqlite3_column_int64(s, 0), size = sqlite3_column_int64(s, 1);
    sqlite3_finalize(s);
    sqlite3_close(db);
    std::fstream f(db_path, std::ios::in | std::ios::out | std::ios::binary);
    const std::int64_t skip = page == 1 ? 100 : 0;  // page 1 keeps its file header
    f.seekp((page - 1) * size + skip);
    const std::string zeros(static_cast<std::size_t>(size - skip), '\0');
    f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
  };
  zero_page("name = 'entries' AND pagetype = 'leaf' ORDER BY pageno LIMIT 1 OFFSET 2");
  auto list = Run({"list", "--json"});
  EXPECT_EQ(list.code, 0) << list.err;
  EXPECT_LT(list.json().size(), 30u);
  EXPECT_NE(list.err.find("verify-cache --repair"), std::string::npos) << list.err;
  auto exported = Run({"export", (tmp_.path() / "b").string()});
  EXPECT_EQ(exported.code, 0) << exported.err;
  auto verify = Run({"verify-cache", "--json"});
  EXPECT_EQ(verify.code, 1) << verify.out << verify.err;
  EXPECT_GT(verify.json()["problems"].size(), 1u);
  auto repair = Run({"verify-cache", "--repair"});
  EXPECT_EQ(repair.code, 1) << repair.out << repair.err;
  EXPECT_NE(repair.out.find("kept as"), std::string::npos) << repair.out;
  auto clean = Run({"verify-cache"});
  EXPECT_EQ(clean.code, 0) << clean.out << clean.err;

  zero_page("name = 'sqlite_schema'");
  const std::vector<std::vector<std::string>> commands = {
      {"list"}, {"verify-cache"}, {"verify-cache", "--repair"}, {"stats"}, {"export", (tmp_.path() / "b2").string()},
      {"import", (tmp_.path() / "b").string()}, {"evict", "--all"}, {"show", "abcdef"}};
  for (const auto& args : commands) {
    const std::string cmd = args[0];
    auto r = RunCli(Args(args, cache_), scratch_);
    EXPECT_EQ(r.code, 2) << cmd;
    EXPECT_EQ(Lines(r.err), 1) << cmd << ": " << r.err;
    EXPECT_NE(r.err.find(cache_.string()), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("damaged"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("SELECT"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("malformed"), std::string::npos) << r.err;
  }
  auto verbose = Run({"list", "--verbose"});
  EXPECT_EQ(Lines(verbose.err), 2) << verbose.err;
  EXPECT_NE(verbose.err.find("SQLite: "), std::string::npos) << verbose.err;
}

TEST_F(CacheCliExitCodes, BadInputGivesExitTwoWithAReadableLine) {
  auto arch = Run({"warmup", "--arch", "sm_12", "--compile-only"});
  EXPECT_EQ(arch.code, 2);
  EXPECT_NE(arch.err.find("unsupported --arch"), std::string::npos) << arch.err;
  auto fam = Run({"warmup", "--arch", "sm_90", "--problem", "nosuch={}"});
  EXPECT_EQ(fam.code, 2);
  EXPECT_NE(fam.err.find("unknown kernel family"), std::string::npos) << fam.err;
  auto cfg = Run({"warmup", "--arch", "sm_90", "--config", "/nonexistent/train.json"});
  EXPECT_EQ(cfg.code, 2);
  EXPECT_EQ(Lines(cfg.err), 1) << cfg.err;
  auto preset = Run({"warmup", "--arch", "sm_90", "--preset", "huge"});
  EXPECT_EQ(preset.code, 2);
  if (gpu::DeviceCount() == 0) {
    auto noarch = Run({"warmup"});
    EXPECT_EQ(noarch.code, 2);
    EXPECT_NE(noarch.err.find("--arch"), std::string::npos) << noarch.err;
  }
  auto help = Run({"warmup", "--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("--compile-only"), std::string::npos);
  auto unknown = Run({"frobnicate"});
  EXPECT_EQ(unknown.code, 2);
}

}  // namespace
}  // namespace dflash
