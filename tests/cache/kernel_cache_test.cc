#include "cache/kernel_cache.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iterator>
#include <thread>

#include "cache/schema.h"
#include "cache_test_util.h"

namespace dflash::cache {
namespace {

using testing::EntryFor;
using testing::KeyFor;
using testing::TempDir;

std::unique_ptr<KernelCache> OpenOrDie(const std::filesystem::path& dir, bool read_only = false) {
  CacheOptions o;
  o.dir = dir;
  o.read_only = read_only;
  auto c = KernelCache::Open(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

// Runs SQL on the database behind the cache's back (what a buggy tool or a bit flip could do).
void RawSql(const std::filesystem::path& dir, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir / kDatabaseFile).c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

std::vector<char> ReadFile(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

void WriteFile(const std::filesystem::path& p, const std::vector<char>& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(KernelCache, PublishedEntryReadsBackBitExact) {
  TempDir dir;
  auto cache = OpenOrDie(dir.path());
  const Entry e = EntryFor(3, "sm_120", 256 * 1024);
  ASSERT_TRUE(cache->Publish(e).ok());
  cache.reset();
  cache = OpenOrDie(dir.path());
  auto got = cache->Lookup(e.key);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  const Entry& g = **got;
  EXPECT_EQ(g.cubin, e.cubin);
  EXPECT_EQ(g.config, e.config);
  EXPECT_EQ(g.kernel_names, e.kernel_names);
  EXPECT_EQ(g.checksum, e.checksum);
  EXPECT_EQ(g.timing.median_ms, e.timing.median_ms);
  EXPECT_EQ(g.provenance.gpu_name, e.provenance.gpu_name);
}

TEST(KernelCache, DatabaseIsInWalModeWithTheCurrentSchemaVersion) {
  TempDir dir;
  auto cache = OpenOrDie(dir.path());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir.path() / kDatabaseFile).c_str(), &db), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &s, nullptr);
  ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)), "wal");
  sqlite3_finalize(s);
  sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &s, nullptr);
  ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(s, 0), kSchemaVersion);
  sqlite3_finalize(s);
  sqlite3_close(db);
}

TEST(KernelCache, LookupWithAnySingleKeyFieldChangedMisses) {
  TempDir dir;
  auto cache = OpenOrDie(dir.path());
  const Entry e = EntryFor(0);
  ASSERT_TRUE(cache->Publish(e).ok());
  std::vector<std::function<void(TuningKey&)>> edits = {
      [](TuningKey& k) { k.family = "other"; },      [](TuningKey& k) { k.source_hash = "stale"; },
      [](TuningKey& k) { k.compile_options = "-G"; }, [](TuningKey& k) { k.arch = "sm_121"; },
      [](TuningKey& k) { k.nvrtc_version = "12.8"; }, [](TuningKey& k) { k.signature = "{}"; },
      [](TuningKey& k) { k.schema_version = 0; },    [](TuningKey& k) { k.tool_version = "0.0.1"; },
  };
  for (std::size_t i = 0; i < edits.size(); ++i) {
    TuningKey k = e.key;
    edits[i](k);
    auto got = cache->Lookup(k);
    ASSERT_TRUE(got.ok());
    EXPECT_FALSE(got->has_value()) << "partial key " << i << " must miss";
  }
  auto exact = cache->Lookup(e.key);
  ASSERT_TRUE(exact.ok());
  EXPECT_TRUE(exact->has_value());
}

TEST(KernelCache, ReadOfBlobWithAFlippedByteOnDiskIsAMissAndQuarantines) {
  TempDir dir;
  const Entry e = EntryFor(1, "sm_120", 64 * 1024);
  {
    auto cache = OpenOrDie(dir.path());
    ASSERT_TRUE(cache->Publish(e).ok());
  }  // last connection closed: WAL checkpointed into the main file
  const auto db = dir.path() / kDatabaseFile;
  std::vector<char> bytes = ReadFile(db);
  // Find a 64-byte run from the middle of the cubin inside the file and flip one bit of it.
  const char* needle = reinterpret_cast<const char*>(e.cubin.data()) + 30000;
  auto it = std::search(bytes.begin(), bytes.end(), needle, needle + 64);
  ASSERT_NE(it, bytes.end()) << "cubin bytes not found in the database file";
  it[10] ^= 0x04;
  WriteFile(db, bytes);

  auto cache = OpenOrDie(dir.path());
  auto got = cache->Lookup(e.key);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_FALSE(got->has_value()) << "a damaged blob must never be returned";
  auto stats = cache->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->quarantined_rows, 1);
  EXPECT_EQ(stats->entries, 0);
  auto report = cache->Verify(false);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << "quarantined row must leave the cache clean";
}

TEST(KernelCache, ConfigChangedBehindItsBackIsCaughtByTheRowChecksum) {
  TempDir dir;
  const Entry e = EntryFor(2);
  OpenOrDie(dir.path())->Publish(e).ok();
  RawSql(dir.path(), "UPDATE entries SET config = '{\"block\":999}'");
  auto cache = OpenOrDie(dir.path());
  auto got = cache->Lookup(e.key);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(cache->Stats()->quarantined_rows, 1);
}

TEST(KernelCache, CubinForAnotherArchIsNeverReturned) {
  TempDir dir;
  auto cache = OpenOrDie(dir.path());
  // Publishing an sm_90 cubin under an sm_120 key is refused outright...
  Entry wrong = EntryFor(4, "sm_120");
  wrong.cubin = testing::FakeCubin(90, 4096, 7);
  EXPECT_EQ(cache->Publish(wrong).code(), ErrorCode::kInvalidArgument);
  // ...and one smuggled in with consistent checksums is caught on read.
  wrong.Seal();
  Entry good = EntryFor(4, "sm_120");
  ASSERT_TRUE(cache->Publish(good).ok());
  cache.reset();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir.path() / kDatabaseFile).c_str(), &db), SQLITE_OK);
    sqlite3_stmt* s = nullptr;
    sqlite3_prepare_v2(db, "UPDATE entries SET cubin = ?, cubin_sha256 = ?, checksum = ?", -1, &s, nullptr);
    sqlite3_bind_blob(s, 1, wrong.cubin.data(), static_cast<int>(wrong.cubin.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, wrong.cubin_sha256.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 3, wrong.checksum.c_str(), -1, SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(s), SQLITE_DONE);
    sqlite3_finalize(s);
    sqlite3_close(db);
  }
  cache = OpenOrDie(dir.path());
  auto got = cache->Lookup(good.key);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());
}

TEST(KernelCache, DatabaseFromANewerSchemaIsRefusedNotMisread) {
  TempDir dir;
  OpenOrDie(dir.path())->Publish(EntryFor(0)).ok();
  RawSql(dir.path(), "PRAGMA user_version = 99");
  CacheOptions o;
  o.dir = dir.path();
  auto c = KernelCache::Open(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(c.status().message().find("newer"), std::string::npos) << c.status().message();
}

TEST(KernelCache, GarbageDatabaseFileIsRefusedWithAClearReason) {
  TempDir dir;
  std::vector<char> junk(10000);
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>(i * 7919 % 251);
  WriteFile(dir.path() / kDatabaseFile, junk);
  CacheOptions o;
  o.dir = dir.path();
  auto c = KernelCache::Open(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kCorruption);
  EXPECT_EQ(ReadFile(dir.path() / kDatabaseFile), junk) << "opening must not touch the damaged file";
}

TEST(KernelCache, TruncatedDatabaseFileIsRefused) {
  TempDir dir;
  {
    auto cache = OpenOrDie(dir.path());
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(cache->Publish(EntryFor(i, "sm_120", 16384)).ok());
  }
  const auto db = dir.path() / kDatabaseFile;
  const auto size = std::filesystem::file_size(db);
  std::filesystem::resize_file(db, size / 2 + 100);  // not even a whole page
  CacheOptions o;
  o.dir = dir.path();
  auto c = KernelCache::Open(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kCorruption);
  EXPECT_NE(c.status().message().find("truncated"), std::string::npos) << c.status().message();
  // Truncated at a page boundary: the header's page count still gives it away.
  std::filesystem::resize_file(db, 4096 * 2);
  c = KernelCache::Open(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kCorruption);
}

// A checkpoint copies the WAL's pages into the file in page order, page 1 (with the new page count) first. A process
// killed right after that leaves a header that promises more pages than the file holds, and SQLite recovers the
// rest from the WAL. Such a cache must open and serve every entry; before the fix, Open refused it for good as
// "truncated" (the header check retried for 2 s and gave up).
TEST(KernelCache, ACheckpointKilledAfterItsFirstPageLeavesACacheThatOpensWhole) {
  TempDir live, crashed;
  auto cache = OpenOrDie(live.path());
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(cache->Publish(EntryFor(i, "sm_120", 100000)).ok());
  // The crash image, taken while the cache is open: nothing checkpointed, the new pages are in the WAL only.
  const auto db = crashed.path() / kDatabaseFile;
  const std::string wal_name = std::string(kDatabaseFile) + "-wal";
  std::filesystem::copy_file(live.path() / kDatabaseFile, db);
  std::filesystem::copy_file(live.path() / wal_name, crashed.path() / wal_name);
  // What the killed checkpoint wrote: the newest copy of page 1 from the WAL, over the file's page 1.
  const std::vector<char> wal = ReadFile(crashed.path() / wal_name);
  ASSERT_GT(wal.size(), 32u);
  auto be32 = [](const char* p) {
    return (std::uint32_t(std::uint8_t(p[0])) << 24) | (std::uint32_t(std::uint8_t(p[1])) << 16) |
           (std::uint32_t(std::uint8_t(p[2])) << 8) | std::uint32_t(std::uint8_t(p[3]));
  };
  const std::size_t page = be32(wal.data() + 8);
  ASSERT_EQ(page, 65536u);
  std::vector<char> bytes = ReadFile(db);
  ASSERT_GE(bytes.size(), page);
  bool found = false;
  for (std::size_t off = 32; off + 24 + page <= wal.size(); off += 24 + page) {
    if (be32(wal.data() + off) != 1) continue;
    std::copy(wal.begin() + off + 24, wal.begin() + off + 24 + page, bytes.begin());
    found = true;
  }
  ASSERT_TRUE(found) << "no frame of page 1 in the WAL";
  WriteFile(db, bytes);
  ASSERT_GT(std::uint64_t(be32(bytes.data() + 28)) * page, std::filesystem::file_size(db))
      << "the image must have a header ahead of its file";

  auto reopened = OpenOrDie(crashed.path());
  ASSERT_NE(reopened, nullptr);
  for (int i = 0; i < 12; ++i) {
    auto got = reopened->Lookup(KeyFor(i));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(got->has_value()) << "entry " << i;
    EXPECT_EQ((**got).cubin, EntryFor(i, "sm_120", 100000).cubin) << "entry " << i;
  }
  auto report = reopened->Verify(false);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->ok());
}

TEST(KernelCache, NetworkFilesystemIsRefusedUnlessAllowed) {
  TempDir dir;
  setenv("DFLASH_TEST_FS_TYPE", "6969", 1);  // NFS_SUPER_MAGIC
  CacheOptions o;
  o.dir = dir.path();
  auto c = KernelCache::Open(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(c.status().message().find("nfs"), std::string::npos);
  o.allow_network_fs = true;
  auto allowed = KernelCache::Open(o);
  EXPECT_TRUE(allowed.ok());
  setenv("DFLASH_TEST_FS_TYPE", "0BD00BD0", 1);  // Lustre
  o.allow_network_fs = false;
  EXPECT_EQ(KernelCache::Open(o).status().code(), ErrorCode::kUnsupported);
  unsetenv("DFLASH_TEST_FS_TYPE");
}

// Runs fn in a child process that cannot write the directory (as 'nobody' when we are root, since root ignores
// permission bits); returns the child's exit code.
int RunUnprivileged(const std::function<int()>& fn) {
  pid_t pid = fork();
  if (pid == 0) {
    if (geteuid() == 0) {
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(90);
    }
    _exit(fn());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 99;
}

TEST(KernelCache, ReadOnlyDirectoryOpensReadOnlyAndStillServesHits) {
  TempDir dir;
  const Entry e = EntryFor(5);
  OpenOrDie(dir.path())->Publish(e).ok();
  std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                                 std::filesystem::perms::group_exec |
                                                 std::filesystem::perms::others_read |
                                                 std::filesystem::perms::others_exec);
  std::filesystem::permissions(dir.path() / kDatabaseFile, std::filesystem::perms::owner_read |
                                                               std::filesystem::perms::owner_write |
                                                               std::filesystem::perms::others_read |
                                                               std::filesystem::perms::group_read);
  std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_write, std::filesystem::perm_options::remove);
  int rc = RunUnprivileged([&]() -> int {
    CacheOptions o;
    o.dir = dir.path();
    auto c = KernelCache::Open(o);
    if (!c.ok()) return 10;
    if (!(*c)->read_only()) return 11;
    auto got = (*c)->Lookup(e.key);
    if (!got.ok() || !got->has_value() || (**got).cubin != e.cubin) return 12;
    auto miss = (*c)->Lookup(KeyFor(77));
    if (!miss.ok() || miss->has_value()) return 13;
    if ((*c)->Publish(EntryFor(6)).code() != ErrorCode::kReadOnly) return 14;
    return 0;
  });
  std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all, std::filesystem::perm_options::add);
  EXPECT_EQ(rc, 0) << "10 open failed, 11 not read-only, 12 hit not served, 13 miss wrong, 14 write allowed";
}

// A read-only open of a 0444 database file in a writable directory makes SQLite create -wal and -shm with mode
// 0444; once the file is writable again, the cache must be writable too (as an unprivileged user, for whom file
// modes are enforced), and the read-only note must name the file, not the directory.
TEST(KernelCache, AReadOnlyPeriodOfTheDatabaseFileLeavesAWritableCacheAfterwards) {
  TempDir dir;
  ASSERT_EQ(chown(dir.path().c_str(), 65534, 65534), 0);
  int rc = RunUnprivileged([&]() -> int {
    const auto db = dir.path() / kDatabaseFile;
    CacheOptions o;
    o.dir = dir.path();
    {
      auto c = KernelCache::Open(o);
      if (!c.ok() || !(*c)->Publish(EntryFor(1)).ok()) return 10;
    }
    std::filesystem::permissions(db, std::filesystem::perms::owner_read | std::filesystem::perms::group_read |
                                         std::filesystem::perms::others_read);
    {
      auto c = KernelCache::Open(o);
      if (!c.ok() || !(*c)->read_only()) return 11;
      if ((*c)->open_note().find("kernels.db is not writable (mode 0444)") == std::string::npos) return 12;
      auto hit = (*c)->Lookup(EntryFor(1).key);
      if (!hit.ok() || !hit->has_value()) return 13;
    }
    std::filesystem::permissions(db, std::filesystem::perms::owner_write, std::filesystem::perm_options::add);
    auto c = KernelCache::Open(o);
    if (!c.ok() || (*c)->read_only()) return 14;
    if (!(*c)->Publish(EntryFor(2)).ok()) return 15;
    for (const char* side : {"-wal", "-shm"}) {
      std::error_code ec;
      auto perms = std::filesystem::status(db.string() + side, ec).permissions();
      if (!ec && (perms & std::filesystem::perms::owner_write) == std::filesystem::perms::none) return 16;
    }
    return 0;
  });
  EXPECT_EQ(rc, 0) << "10 first publish, 11 not read-only, 12 note, 13 hit, 14 reopen, 15 write failed, "
                      "16 side file still read-only";
}

TEST(KernelCache, GetOrBuildRunsTheBuildOncePerKeyAcrossThreads) {
  TempDir dir;
  auto cache = OpenOrDie(dir.path());
  std::atomic<int> builds{0};
  std::vector<std::thread> threads;
  std::atomic<int> built_here{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int k = 0; k < 5; ++k) {
        auto r = cache->GetOrBuild(KeyFor(k), [&]() -> Result<Entry> {
          ++builds;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          return EntryFor(k);
        });
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        EXPECT_EQ(r->entry.cubin, EntryFor(k).cubin);
        if (r->built_here) ++built_here;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(builds.load(), 5);
  EXPECT_EQ(built_here.load(), 5);
}

TEST(KernelCache, FailedBuildPublishesNothingAndTheNextCallerBuilds) {
  TempDir dir;
  auto cache = OpenOrDie(dir.path());
  auto r = cache->GetOrBuild(KeyFor(0), []() -> Result<Entry> { return Internal("compiler exploded"); });
  EXPECT_FALSE(r.ok());
  auto again = cache->GetOrBuild(KeyFor(0), []() -> Result<Entry> { return EntryFor(0); });
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->built_here);
}

TEST(KernelCache, PersistentlyBusyDatabaseGivesABusyErrorWithinTheBudget) {
  TempDir dir;
  CacheOptions o;
  o.dir = dir.path();
  o.busy_budget = std::chrono::milliseconds(300);
  auto cache = KernelCache::Open(o);
  ASSERT_TRUE(cache.ok());
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open((dir.path() / kDatabaseFile).c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  auto start = std::chrono::steady_clock::now();
  Status st = (*cache)->Publish(EntryFor(0));
  auto took = std::chrono::steady_clock::now() - start;
  sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(other);
  EXPECT_EQ(st.code(), ErrorCode::kBusy) << st.ToString();
  EXPECT_NE(st.message().find("busy"), std::string::npos);
  EXPECT_LT(took, std::chrono::seconds(15));
  EXPECT_TRUE((*cache)->Publish(EntryFor(0)).ok()) << "works again once the other writer is gone";
}

TEST(KernelCache, CandidatesAreKeptAndUpdatedPerConfig) {
  TempDir dir;
  auto cache = OpenOrDie(dir.path());
  const std::string d = KeyFor(0).Digest();
  CandidateResult a{d, "{\"b\":1}", Outcome::kOk, {1.0, 0.01, 25}, "", "gpu", 1};
  CandidateResult b{d, "{\"b\":2}", Outcome::kCompileFailed, {}, "error: boom", "gpu", 1};
  ASSERT_TRUE(cache->Publish(EntryFor(0), std::vector<CandidateResult>{a, b}).ok());
  CandidateResult c{d, "{\"b\":3}", Outcome::kMismatch, {}, "max err 0.5", "gpu", 2};
  ASSERT_TRUE(cache->RecordCandidates(std::vector<CandidateResult>{c}).ok());
  auto got = cache->Candidates(d);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 3u);
  EXPECT_EQ((*got)[1].outcome, Outcome::kCompileFailed);
  EXPECT_EQ((*got)[1].reason, "error: boom");
  EXPECT_EQ((*got)[2].outcome, Outcome::kMismatch);
}

TEST(KernelCache, ArtifactsAreBuiltOncePerVariantAndVerifiedOnRead) {
  TempDir dir;
  auto cache = OpenOrDie(dir.path());
  ArtifactKey key{"fam", "{\"b\":1}", "h", "-O3", "sm_90", "13.0"};
  int builds = 0;
  auto make = [&]() -> Result<Artifact> {
    ++builds;
    Artifact a;
    a.key = key;
    a.cubin = testing::FakeCubin(90, 2048, 3);
    a.kernel_names = "{}";
    a.resources = "{}";
    return a;
  };
  ASSERT_TRUE(cache->GetOrBuildArtifact(key, make).ok());
  auto second = cache->GetOrBuildArtifact(key, make);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->built_here);
  EXPECT_EQ(builds, 1);
  RawSql(dir.path(), "UPDATE artifacts SET resources = '{\"x\":1}'");
  auto damaged = cache->LookupArtifact(key);
  ASSERT_TRUE(damaged.ok());
  EXPECT_FALSE(damaged->has_value());
}

TEST(KernelCache, VerifyFindsEachBadRowAndRepairMakesTheNextVerifyClean) {
  TempDir dir;
  {
    auto cache = OpenOrDie(dir.path());
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(cache->Publish(EntryFor(i)).ok());
  }
  RawSql(dir.path(), "UPDATE entries SET median_ms = 0.001 WHERE signature LIKE '%2048%'");
  RawSql(dir.path(), "UPDATE entries SET cubin = zeroblob(100) WHERE signature LIKE '%3072%'");
  auto cache = OpenOrDie(dir.path());
  auto report = cache->Verify(false);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->entries_checked, 4);
  EXPECT_EQ(report->problems.size(), 2u);
  auto repaired = cache->Verify(true);
  ASSERT_TRUE(repaired.ok());
  EXPECT_EQ(repaired->repaired, 2);
  auto clean = cache->Verify(false);
  ASSERT_TRUE(clean.ok());
  EXPECT_TRUE(clean->ok());
  EXPECT_EQ(clean->entries_checked, 2);
}

TEST(KernelCache, EvictByFamilyArchAndStaleToolchain) {
  TempDir dir;
  auto cache = OpenOrDie(dir.path());
  ASSERT_TRUE(cache->Publish(EntryFor(0, "sm_120")).ok());
  ASSERT_TRUE(cache->Publish(EntryFor(1, "sm_90")).ok());
  Entry old = EntryFor(2, "sm_120");
  old.key.nvrtc_version = "12.8";
  ASSERT_TRUE(cache->Publish(old).ok());
  EXPECT_EQ(cache->Evict({}).status().code(), ErrorCode::kInvalidArgument);
  EvictFilter stale;
  stale.stale_nvrtc = "13.0";
  EXPECT_EQ(*cache->Evict(stale), 1);
  EvictFilter arch;
  arch.arch = "sm_90";
  EXPECT_EQ(*cache->Evict(arch), 1);
  EvictFilter all;
  all.all = true;
  EXPECT_EQ(*cache->Evict(all), 1);
  EXPECT_EQ(cache->Stats()->entries, 0);
}

TEST(KernelCache, HitAndMissCountersPersistAcrossProcesses) {
  TempDir dir;
  {
    auto cache = OpenOrDie(dir.path());
    ASSERT_TRUE(cache->Publish(EntryFor(0)).ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(cache->Lookup(KeyFor(0)).ok());
    ASSERT_TRUE(cache->Lookup(KeyFor(9)).ok());
  }
  pid_t pid = fork();
  if (pid == 0) {
    CacheOptions o;
    o.dir = dir.path();
    {
      auto c = KernelCache::Open(o);
      if (c.ok()) (void)(*c)->Lookup(KeyFor(0));
    }  // the destructor flushes this process's counters
    _exit(0);
  }
  waitpid(pid, nullptr, 0);
  auto stats = OpenOrDie(dir.path())->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->hits, 4);
  EXPECT_EQ(stats->misses, 1);
}

TEST(KernelCache, AFileWhereTheDirectoryShouldBeOrAMissingDirectoryWithoutCreateIsRefused) {
  TempDir tmp;
  const auto file = tmp.path() / "not-a-dir";
  std::ofstream(file) << "x";
  CacheOptions o;
  o.dir = file;
  auto r = KernelCache::Open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("is not a directory"), std::string::npos) << r.status().ToString();

  o.dir = tmp.path() / "missing";
  o.create = false;
  r = KernelCache::Open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(o.dir));
}

TEST(KernelCache, DefaultDirectoryFollowsTheEnvironment) {
  setenv("DFLASH_CACHE_DIR", "/x/dflash", 1);
  EXPECT_EQ(DefaultCacheDir(), "/x/dflash");
  unsetenv("DFLASH_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/y", 1);
  EXPECT_EQ(DefaultCacheDir(), "/y/dflash-tune");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/z", 1);
  EXPECT_EQ(DefaultCacheDir(), "/home/z/.cache/dflash-tune");
}

}  // namespace
}  // namespace dflash::cache
