#include "cache/bundle.h"

#include <ctime>
#include <fstream>
#include <sstream>

#include "base/atomic_file.h"
#include "base/sha256.h"
#include "cache/rows.h"

namespace dflash::cache {
namespace {

constexpr const char* kFormat = "dflash-tune-bundle";
constexpr int kBundleVersion = 1;

}  // namespace

Result<ExportReport> ExportBundle(KernelCache& cache, const std::filesystem::path& bundle) {
  ExportReport report;
  std::int64_t unreadable = 0;
  DFLASH_ASSIGN_OR_RETURN(std::vector<Entry> entries, cache.AllEntries(&unreadable));
  report.skipped_bad = unreadable;
  nlohmann::json j = {{"format", kFormat}, {"version", kBundleVersion},
                      {"created_at", static_cast<std::int64_t>(std::time(nullptr))},
                      {"entries", nlohmann::json::array()}};
  for (const Entry& e : entries) {
    if (!CheckEntryRow(e, e.key.Digest()).ok()) {
      ++report.skipped_bad;
      continue;
    }
    j["entries"].push_back(EntryToJson(e, /*with_cubin=*/true));
    ++report.exported;
  }
  const std::string body = j.dump();
  DFLASH_RETURN_IF_ERROR(AtomicWriteText(bundle, body + "\nsha256:" + Sha256Hex(body) + "\n"));
  return report;
}

Result<ImportReport> ImportBundle(KernelCache& cache, const std::filesystem::path& bundle) {
  std::ifstream in(bundle, std::ios::binary);
  if (!in) return NotFound("cannot open bundle " + bundle.string());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const std::size_t nl = text.find('\n');
  if (nl == std::string::npos || text.compare(nl + 1, 7, "sha256:") != 0) {
    return Corruption(bundle.string() + " is not a dflash-tune bundle (no checksum trailer; truncated?)");
  }
  const std::string body = text.substr(0, nl);
  std::string want = text.substr(nl + 8);
  while (!want.empty() && (want.back() == '\n' || want.back() == '\r')) want.pop_back();
  if (Sha256Hex(body) != want) return Corruption(bundle.string() + " fails its checksum (damaged in transit?)");
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != kFormat) {
    return Corruption(bundle.string() + " is not a dflash-tune bundle");
  }
  if (j.value("version", 0) > kBundleVersion) {
    return Unsupported(bundle.string() + " is bundle version " + std::to_string(j.value("version", 0)) +
                       ", newer than this dflash-tune reads");
  }
  ImportReport report;
  for (const nlohmann::json& rec : j.value("entries", nlohmann::json::array())) {
    const std::string digest = rec.value("key_digest", "?");
    Result<Entry> e = EntryFromJson(rec);
    Status ok = e.ok() ? CheckEntryRow(*e, digest) : e.status();
    if (!ok.ok()) {
      report.rejected.push_back(digest + ": " + ok.message());
      continue;
    }
    // The comparison with our entry and the write are one transaction: a concurrent import cannot slip between.
    DFLASH_ASSIGN_OR_RETURN(KernelCache::Merge merge, cache.PublishUnlessSlower(*e));
    switch (merge) {
      case KernelCache::Merge::kNew: ++report.imported; break;
      case KernelCache::Merge::kReplaced: ++report.replaced; break;
      case KernelCache::Merge::kKeptOurs: ++report.kept_ours; break;
    }
  }
  return report;
}

}  // namespace dflash::cache
