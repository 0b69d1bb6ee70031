// Damage that disks and copies really do, placed through SQLite's own page map (dbstat), never at guessed
// offsets: the first page of one row's overflow chain, a leaf page and an interior page of the entries,
// artifacts and candidates tables, zeroed on disk. Which rows a damage hides is asked of SQLite itself (a raw
// read of each row), then the cache must: miss those lookups without an error, serve every other row bit-exact,
// rebuild exactly the damaged keys, report each problem in verify and go on, salvage with --repair into a
// database whose next verify is clean, keep the damaged file aside, and survive a repair killed midway.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <thread>

#include "cache/bundle.h"
#include "cache/kernel_cache.h"
#include "cache/schema.h"
#include "cache_test_util.h"

namespace dflash::cache {
namespace {

using testing::EntryFor;
using testing::KeyFor;
using testing::TempDir;

constexpr int kEntries = 40;
constexpr int kCandidates = 1200;   // small rows: enough for several leaves under an interior page
// Over two 64 KiB overflow pages per row, so a zeroed first overflow page breaks the chain SQLite follows.
constexpr std::size_t kCubinBytes = 150000;

std::unique_ptr<KernelCache> OpenOrDie(const std::filesystem::path& dir) {
  CacheOptions o;
  o.dir = dir;
  auto c = KernelCache::Open(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

ArtifactKey ArtifactKeyFor(int i) { return {"fam", "{\"b\":" + std::to_string(i) + "}", "h", "-O3", "sm_90", "13.0"}; }

Artifact ArtifactFor(int i) {
  Artifact a;
  a.key = ArtifactKeyFor(i);
  a.cubin = testing::FakeCubin(90, kCubinBytes, 500 + i);
  a.kernel_names = "{}";
  a.resources = "{}";
  a.Seal();
  return a;
}

CandidateResult CandidateFor(int i) {
  CandidateResult c;
  c.key_digest = KeyFor(i % kEntries).Digest();
  c.config = "{\"variant\":" + std::to_string(i) + "}";
  c.timing = {1.0 + i, 0.01, 10};
  c.gpu_name = "Test GPU";
  c.created_at = 1700000000;
  return c;
}

void Fill(const std::filesystem::path& dir) {
  auto cache = OpenOrDie(dir);
  for (int i = 0; i < kEntries; ++i) {
    ASSERT_TRUE(cache->Publish(EntryFor(i, "sm_120", kCubinBytes)).ok());
    ASSERT_TRUE(cache->PutArtifact(ArtifactFor(i)).ok());
  }
  std::vector<CandidateResult> cands;
  for (int i = 0; i < kCandidates; ++i) cands.push_back(CandidateFor(i));
  ASSERT_TRUE(cache->RecordCandidates(cands).ok());
}

// Raw SQLite access behind the cache's back.
struct RawDb {
  explicit RawDb(const std::filesystem::path& dir) {
    EXPECT_EQ(sqlite3_open((dir / kDatabaseFile).c_str(), &db), SQLITE_OK);
  }
  ~RawDb() { sqlite3_close(db); }
  // SQLITE_OK when `sql` (one bound text parameter) runs to completion, else the error code.
  int Run(const std::string& sql, const std::string& param = "") {
    sqlite3_stmt* s = nullptr;
    int rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr);
    if (rc != SQLITE_OK) return rc;
    if (!param.empty()) sqlite3_bind_text(s, 1, param.c_str(), -1, SQLITE_TRANSIENT);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      for (int i = 0; i < sqlite3_column_count(s); ++i) sqlite3_column_blob(s, i);  // read every byte
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
  }
  std::vector<std::int64_t> Ints(const std::string& sql) {
    std::vector<std::int64_t> out;
    sqlite3_stmt* s = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    while (sqlite3_step(s) == SQLITE_ROW) out.push_back(sqlite3_column_int64(s, 0));
    sqlite3_finalize(s);
    return out;
  }
  sqlite3* db = nullptr;
};

enum class Damage { kOverflowChain, kLeaf, kInterior };
const char* Name(Damage d) {
  return d == Damage::kOverflowChain ? "OverflowChain" : d == Damage::kLeaf ? "Leaf" : "Interior";
}

// Zeroes one page of `table`'s b-tree chosen through dbstat; returns its page number.
std::int64_t ZeroPage(const std::filesystem::path& dir, const std::string& table, Damage damage) {
  std::int64_t page = 0, page_size = 0;
  {
    RawDb raw(dir);
    EXPECT_EQ(raw.Run("PRAGMA wal_checkpoint(TRUNCATE)"), SQLITE_OK);  // every page in the main file
    page_size = raw.Ints("PRAGMA page_size").at(0);
    std::string where = damage == Damage::kOverflowChain ? "pagetype = 'overflow' AND path LIKE '%+000000'"
                        : damage == Damage::kLeaf        ? "pagetype = 'leaf'"
                                                         : "pagetype = 'internal'";
    auto pages = raw.Ints("SELECT pageno FROM dbstat WHERE name = '" + table + "' AND " + where + " ORDER BY path");
    EXPECT_FALSE(pages.empty()) << table << " has no " << Name(damage) << " page";
    if (pages.empty()) return 0;
    page = pages[pages.size() / 2];
  }
  std::fstream f(dir / kDatabaseFile, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp((page - 1) * page_size);
  const std::vector<char> zeros(static_cast<std::size_t>(page_size), 0);
  f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
  EXPECT_TRUE(f.good());
  return page;
}

// The indices whose row SQLite itself can no longer read.
std::set<int> UnreadableRows(const std::filesystem::path& dir, const std::string& table) {
  RawDb raw(dir);
  std::set<int> out;
  const int n = table == "candidates" ? kCandidates : kEntries;
  for (int i = 0; i < n; ++i) {
    int rc = table == "entries"     ? raw.Run("SELECT * FROM entries WHERE key_digest = ?", KeyFor(i).Digest())
             : table == "artifacts" ? raw.Run("SELECT * FROM artifacts WHERE artifact_digest = ?",
                                              ArtifactKeyFor(i).Digest())
                                    : raw.Run("SELECT * FROM candidates WHERE key_digest = '" +
                                                  CandidateFor(i).key_digest + "' AND config = ?",
                                              CandidateFor(i).config);
    if (rc != SQLITE_OK) {
      EXPECT_EQ(rc & 0xff, SQLITE_CORRUPT) << sqlite3_errstr(rc);
      out.insert(i);
    }
  }
  return out;
}

// Every entry and artifact outside the damaged set reads back bit for bit; the damaged ones miss.
void ExpectSurvivorsBitExact(KernelCache& cache, const std::string& table, const std::set<int>& damaged) {
  for (int i = 0; i < kEntries; ++i) {
    auto e = cache.Lookup(KeyFor(i));
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    if (table == "entries" && damaged.count(i)) {
      EXPECT_FALSE(e->has_value()) << "damaged entry " << i << " was served";
    } else {
      ASSERT_TRUE(e->has_value()) << "sound entry " << i << " was lost";
      EXPECT_EQ((*e)->cubin, EntryFor(i, "sm_120", kCubinBytes).cubin);
    }
    auto a = cache.LookupArtifact(ArtifactKeyFor(i));
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    if (table == "artifacts" && damaged.count(i)) {
      EXPECT_FALSE(a->has_value()) << "damaged artifact " << i << " was served";
    } else {
      ASSERT_TRUE(a->has_value()) << "sound artifact " << i << " was lost";
      EXPECT_EQ((*a)->cubin, ArtifactFor(i).cubin);
    }
  }
}

struct Case {
  std::string table;
  Damage damage;
};

class DamagedCache : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    Fill(dir_.path());
    ASSERT_NE(ZeroPage(dir_.path(), GetParam().table, GetParam().damage), 0);
    damaged_ = UnreadableRows(dir_.path(), GetParam().table);
    ASSERT_FALSE(damaged_.empty()) << "the damage hid no row: the test would prove nothing";
    // An interior page is the table's root here (64 KiB pages): it hides every row of its table.
    const int n = GetParam().table == "candidates" ? kCandidates : kEntries;
    if (GetParam().damage != Damage::kInterior) ASSERT_LT(static_cast<int>(damaged_.size()), n);
  }
  TempDir dir_;
  std::set<int> damaged_;
};

TEST_P(DamagedCache, VerifyReportsTheDamageGoesOnAndRepairLeavesACleanCacheWithEverySoundRowBitExact) {
  const std::string table = GetParam().table;
  {
    auto cache = OpenOrDie(dir_.path());
    auto report = cache->Verify(false);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_FALSE(report->ok());
    bool names_table = false;
    for (const auto& p : report->problems) names_table |= p.table == table || p.table == "database";
    EXPECT_TRUE(names_table);
    if (table == "entries") EXPECT_EQ(report->entries_checked, kEntries - static_cast<int>(damaged_.size()));
    if (table != "entries") EXPECT_EQ(report->entries_checked, kEntries);
    // list and export keep working beside the damage.
    std::int64_t unreadable = -1;
    auto listed = cache->List(&unreadable);
    ASSERT_TRUE(listed.ok()) << listed.status().ToString();
    EXPECT_EQ(static_cast<std::int64_t>(listed->size()) + (table == "entries" ? unreadable : 0), kEntries);
    auto exported = ExportBundle(*cache, dir_.path() / "bundle");
    ASSERT_TRUE(exported.ok()) << exported.status().ToString();

    auto repaired = cache->Verify(true);
    ASSERT_TRUE(repaired.ok()) << repaired.status().ToString();
    ASSERT_TRUE(repaired->salvage.has_value());
    EXPECT_TRUE(std::filesystem::exists(repaired->salvage->kept_aside));
    EXPECT_FALSE(repaired->salvage->lost.empty() && repaired->salvage->damaged.empty());
  }
  auto cache = OpenOrDie(dir_.path());
  auto clean = cache->Verify(false);
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  for (const auto& p : clean->problems) ADD_FAILURE() << "after repair: " << p.table << " " << p.row << ": " << p.what;
  ExpectSurvivorsBitExact(*cache, table, damaged_);
  // The next warmup re-tunes exactly what was lost.
  std::set<int> built, want;
  for (int i = 0; i < kEntries; ++i) {
    ASSERT_TRUE(cache->GetOrBuild(KeyFor(i), [&]() -> Result<Entry> {
                       built.insert(i);
                       return EntryFor(i, "sm_120", kCubinBytes);
                     }).ok());
    ASSERT_TRUE(cache->GetOrBuildArtifact(ArtifactKeyFor(i), [&]() -> Result<Artifact> {
                       built.insert(1000 + i);
                       return ArtifactFor(i);
                     }).ok());
  }
  for (int i : damaged_) {
    if (table == "entries") want.insert(i);
    if (table == "artifacts") want.insert(1000 + i);
  }
  EXPECT_EQ(built, want);
  if (table == "candidates") {
    auto stats = cache->Stats();
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->candidates, kCandidates - static_cast<int>(damaged_.size()));
  }
}

TEST_P(DamagedCache, LookupsMissWithoutAnErrorAndRebuildingEveryKeyBuildsExactlyTheDamagedOnes) {
  const std::string table = GetParam().table;
  auto cache = OpenOrDie(dir_.path());
  std::set<int> built;
  for (int i = 0; i < kEntries; ++i) {
    auto got = cache->GetOrBuild(KeyFor(i), [&]() -> Result<Entry> {
      built.insert(i);
      return EntryFor(i, "sm_120", kCubinBytes);
    });
    ASSERT_TRUE(got.ok()) << "key " << i << ": " << got.status().ToString();
    auto art = cache->GetOrBuildArtifact(ArtifactKeyFor(i), [&]() -> Result<Artifact> {
      built.insert(1000 + i);
      return ArtifactFor(i);
    });
    ASSERT_TRUE(art.ok()) << "artifact " << i << ": " << art.status().ToString();
    auto cands = cache->Candidates(KeyFor(i).Digest());
    ASSERT_TRUE(cands.ok()) << cands.status().ToString();
  }
  std::set<int> want;
  for (int i : damaged_) {
    if (table == "entries") want.insert(i);
    if (table == "artifacts") want.insert(1000 + i);
  }
  // A damaged interior page can hide more rows from a write than SQLite's reads showed; never fewer.
  if (GetParam().damage == Damage::kInterior) {
    for (int i : want) EXPECT_TRUE(built.count(i)) << "damaged key " << i << " was not rebuilt";
  } else {
    EXPECT_EQ(built, want);
  }
  // Everything now reads back; the cache healed itself (or quarantined) and says so in verify after a repair.
  for (int i = 0; i < kEntries; ++i) {
    auto e = cache->Lookup(KeyFor(i));
    ASSERT_TRUE(e.ok() && e->has_value()) << "entry " << i;
    EXPECT_EQ((*e)->cubin, EntryFor(i, "sm_120", kCubinBytes).cubin);
  }
  ASSERT_TRUE(cache->Verify(true).ok());
  auto clean = cache->Verify(false);
  ASSERT_TRUE(clean.ok());
  EXPECT_TRUE(clean->ok());
}

TEST_P(DamagedCache, EvictAllSucceedsAndLeavesNoEntryOrArtifact) {
  auto cache = OpenOrDie(dir_.path());
  EvictFilter all;
  all.all = true;
  auto removed = cache->Evict(all);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  auto stats = cache->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->entries, 0);
  EXPECT_EQ(stats->artifacts, 0);
  // Evict removes entries and artifacts; damage among the candidates stays for verify to report.
  auto after = cache->Verify(false);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->ok(), GetParam().table != "candidates");
}

std::vector<Case> AllCases() {
  std::vector<Case> out;
  for (const char* t : {"entries", "artifacts", "candidates"}) {
    for (Damage d : {Damage::kOverflowChain, Damage::kLeaf, Damage::kInterior}) {
      if (std::string(t) == "candidates" && d == Damage::kOverflowChain) continue;  // its rows have no blobs
      out.push_back({t, d});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Pages, DamagedCache, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.table + Name(info.param.damage);
                         });

// A repair killed at any moment leaves the old (damaged) database or the new one, never neither and never a
// half-copied one: after every kill the cache opens, and it verifies either clean or with the damage.
TEST(DamagedCacheRepair, ARepairKilledMidwayLeavesTheOldOrTheNewDatabase) {
  TempDir dir;
  Fill(dir.path());
  ZeroPage(dir.path(), "entries", Damage::kLeaf);
  const std::set<int> damaged = UnreadableRows(dir.path(), "entries");
  ASSERT_FALSE(damaged.empty());
  int saw_old = 0, saw_new = 0;
  for (int round = 0; round < 12; ++round) {
    pid_t pid = fork();
    if (pid == 0) {
      CacheOptions o;
      o.dir = dir.path();
      auto c = KernelCache::Open(o);
      if (!c.ok()) _exit(3);
      _exit((*c)->Verify(true).ok() ? 0 : 4);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + 15 * round));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    auto cache = OpenOrDie(dir.path());
    ASSERT_NE(cache, nullptr) << "round " << round << ": the cache does not open after a killed repair";
    auto report = cache->Verify(false);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    ++(report->ok() ? saw_new : saw_old);
    ExpectSurvivorsBitExact(*cache, "entries", damaged);
    if (report->ok()) break;  // the repair finished before the kill: nothing more to interrupt
  }
  EXPECT_GT(saw_old, 0) << "no kill landed before the swap: the test proved nothing";
  auto cache = OpenOrDie(dir.path());
  ASSERT_TRUE(cache->Verify(true).ok());
  auto clean = cache->Verify(false);
  ASSERT_TRUE(clean.ok());
  EXPECT_TRUE(clean->ok());
  ExpectSurvivorsBitExact(*cache, "entries", damaged);
}

}  // namespace
}  // namespace dflash::cache
