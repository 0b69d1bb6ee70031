#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "cache/cache_key.h"
#include "cache/entry.h"
#include "cache_test_util.h"

namespace dflash::cache {
namespace {

TEST(TuningKey, ChangingAnySingleFieldChangesTheDigest) {
  const TuningKey base = testing::KeyFor(0);
  std::vector<std::function<void(TuningKey&)>> edits = {
      [](TuningKey& k) { k.family += "x"; },          [](TuningKey& k) { k.source_hash += "x"; },
      [](TuningKey& k) { k.compile_options += " -G"; }, [](TuningKey& k) { k.arch = "sm_121"; },
      [](TuningKey& k) { k.nvrtc_version = "13.1"; },  [](TuningKey& k) { k.signature += " "; },
      [](TuningKey& k) { k.schema_version += 1; },     [](TuningKey& k) { k.tool_version += ".1"; },
  };
  for (std::size_t i = 0; i < edits.size(); ++i) {
    TuningKey k = base;
    edits[i](k);
    EXPECT_NE(k.Digest(), base.Digest()) << "edit " << i;
  }
  EXPECT_EQ(testing::KeyFor(0).Digest(), base.Digest());
}

TEST(TuningKey, FieldBoundariesAreNotAmbiguous) {
  TuningKey a = testing::KeyFor(0), b = testing::KeyFor(0);
  a.family = "ab";
  a.source_hash = "c";
  b.family = "a";
  b.source_hash = "bc";
  EXPECT_NE(a.Digest(), b.Digest());
}

TEST(ArtifactKey, ChangingAnySingleFieldChangesTheDigest) {
  ArtifactKey base{"fam", "{\"a\":1}", "h", "-O3", "sm_120", "13.0"};
  std::vector<std::function<void(ArtifactKey&)>> edits = {
      [](ArtifactKey& k) { k.family += "x"; },   [](ArtifactKey& k) { k.config = "{\"a\":2}"; },
      [](ArtifactKey& k) { k.source_hash += "x"; }, [](ArtifactKey& k) { k.compile_options += " "; },
      [](ArtifactKey& k) { k.arch = "sm_121"; }, [](ArtifactKey& k) { k.nvrtc_version = "12.9"; },
      [](ArtifactKey& k) { k.schema_version++; }, [](ArtifactKey& k) { k.tool_version += "x"; },
  };
  for (std::size_t i = 0; i < edits.size(); ++i) {
    ArtifactKey k = base;
    edits[i](k);
    EXPECT_NE(k.Digest(), base.Digest()) << "edit " << i;
  }
}

TEST(Entry, RowChecksumCoversConfigTimingsAndProvenance) {
  const Entry base = testing::EntryFor(1);
  std::vector<std::function<void(Entry&)>> edits = {
      [](Entry& e) { e.config += " "; },
      [](Entry& e) { e.kernel_names += " "; },
      [](Entry& e) { e.timing.median_ms += 1e-9; },
      [](Entry& e) { e.timing.repetitions++; },
      [](Entry& e) { e.provenance.gpu_name += "x"; },
      [](Entry& e) { e.provenance.created_at++; },
      [](Entry& e) { e.cubin_sha256[0] ^= 1; },
      [](Entry& e) { e.key.arch = "sm_121"; },
  };
  for (std::size_t i = 0; i < edits.size(); ++i) {
    Entry e = base;
    edits[i](e);
    EXPECT_NE(RowChecksum(e), base.checksum) << "edit " << i;
  }
}

}  // namespace
}  // namespace dflash::cache
