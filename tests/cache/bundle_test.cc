#include "cache/bundle.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "cache_test_util.h"

namespace dflash::cache {
namespace {

using testing::EntryFor;
using testing::TempDir;

std::unique_ptr<KernelCache> Open(const std::filesystem::path& dir) {
  CacheOptions o;
  o.dir = dir;
  auto c = KernelCache::Open(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(*c);
}

TEST(Bundle, ExportThenImportMovesEveryEntryBitExact) {
  TempDir a, b;
  auto src = Open(a.path());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(src->Publish(EntryFor(i)).ok());
  auto exported = ExportBundle(*src, a.path() / "tuned.bundle");
  ASSERT_TRUE(exported.ok()) << exported.status().ToString();
  EXPECT_EQ(exported->exported, 5);
  auto dst = Open(b.path());
  auto imported = ImportBundle(*dst, a.path() / "tuned.bundle");
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_EQ(imported->imported, 5);
  for (int i = 0; i < 5; ++i) {
    auto got = dst->Lookup(EntryFor(i).key);
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_EQ((**got).cubin, EntryFor(i).cubin);
    EXPECT_EQ((**got).checksum, EntryFor(i).checksum);
  }
}

TEST(Bundle, ImportKeepsTheFasterOfTwoEntriesForOneKey) {
  TempDir a, b;
  auto src = Open(a.path());
  Entry fast = EntryFor(0);
  fast.timing.median_ms = 0.1;
  Entry slow = EntryFor(1);
  slow.timing.median_ms = 9.0;
  ASSERT_TRUE(src->Publish(fast).ok());
  ASSERT_TRUE(src->Publish(slow).ok());
  ASSERT_TRUE(ExportBundle(*src, a.path() / "x.bundle").ok());
  auto dst = Open(b.path());
  Entry ours_slow = EntryFor(0);
  ours_slow.timing.median_ms = 5.0;
  Entry ours_fast = EntryFor(1);
  ours_fast.timing.median_ms = 1.0;
  ASSERT_TRUE(dst->Publish(ours_slow).ok());
  ASSERT_TRUE(dst->Publish(ours_fast).ok());
  auto r = ImportBundle(*dst, a.path() / "x.bundle");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->replaced, 1);
  EXPECT_EQ(r->kept_ours, 1);
  EXPECT_DOUBLE_EQ((**dst->Lookup(fast.key)).timing.median_ms, 0.1);
  EXPECT_DOUBLE_EQ((**dst->Lookup(slow.key)).timing.median_ms, 1.0);
}

// Two processes importing one key set at once, one bundle slow and one fast: the faster entry must win every key,
// whatever the interleaving (the comparison is part of the publishing transaction).
TEST(Bundle, RacingImportsOfTheSameKeysKeepTheFasterEntryEveryTime) {
  constexpr int kKeys = 30, kRounds = 12;
  TempDir bundles;
  for (const bool fast : {false, true}) {
    TempDir src;
    auto c = Open(src.path());
    for (int i = 0; i < kKeys; ++i) {
      Entry e = EntryFor(i);
      e.timing.median_ms = fast ? 0.1 : 10.0;
      ASSERT_TRUE(c->Publish(e).ok());
    }
    ASSERT_TRUE(ExportBundle(*c, bundles.path() / (fast ? "fast" : "slow")).ok());
  }
  int slower_kept = 0;
  for (int round = 0; round < kRounds; ++round) {
    TempDir dst;
    Open(dst.path());  // the database exists before the race starts
    int go[2];
    ASSERT_EQ(pipe(go), 0);
    std::vector<pid_t> pids;
    for (const char* name : {"slow", "fast"}) {
      pid_t pid = fork();
      if (pid == 0) {
        close(go[1]);
        char byte;
        if (read(go[0], &byte, 1) != 0) _exit(5);  // released together when the pipe closes
        CacheOptions o;
        o.dir = dst.path();
        auto c = KernelCache::Open(o);
        if (!c.ok()) _exit(3);
        _exit(ImportBundle(**c, bundles.path() / name).ok() ? 0 : 4);
      }
      pids.push_back(pid);
    }
    close(go[0]);
    close(go[1]);
    for (pid_t pid : pids) {
      int status = 0;
      waitpid(pid, &status, 0);
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "an import failed";
    }
    auto c = Open(dst.path());
    for (int i = 0; i < kKeys; ++i) {
      auto got = c->Lookup(EntryFor(i).key);
      ASSERT_TRUE(got.ok() && got->has_value());
      slower_kept += (**got).timing.median_ms > 1.0;
    }
  }
  EXPECT_EQ(slower_kept, 0) << "of " << kKeys * kRounds << " keys";
}

TEST(Bundle, DamagedBundleIsRejectedWholeAndImportsNothing) {
  TempDir a, b;
  auto src = Open(a.path());
  ASSERT_TRUE(src->Publish(EntryFor(0)).ok());
  const auto path = a.path() / "x.bundle";
  ASSERT_TRUE(ExportBundle(*src, path).ok());
  std::string text;
  {
    std::ifstream f(path, std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  text[text.size() / 2] ^= 0x01;
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
  }
  auto dst = Open(b.path());
  auto r = ImportBundle(*dst, path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kCorruption);
  EXPECT_EQ(dst->Stats()->entries, 0);
  // Truncated: no trailer at all.
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text.substr(0, text.size() / 3);
  }
  EXPECT_EQ(ImportBundle(*dst, path).status().code(), ErrorCode::kCorruption);
  EXPECT_EQ(ImportBundle(*dst, a.path() / "missing.bundle").status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace dflash::cache
