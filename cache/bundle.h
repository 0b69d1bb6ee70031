// Export/import bundles: a portable, checksummed file that moves tuned entries between machines.
// Format (version 1): one line of JSON {"format":"dflash-tune-bundle","version":1,"created_at":...,
// "entries":[<EntryToJson with cubin_base64>...]}, then a trailer line "sha256:<hex of the JSON line>".
// Published with AtomicWriteFile (base/atomic_file.h), so a bundle is either complete or absent, power cut included.
// Import verifies the trailer, then every entry's own checksums and cubin, and merges: for a key present on both
// sides the faster entry (lower median) is kept, compared inside the publishing transaction, so imports racing
// on one key keep the faster entry whatever their order. Thread-safety: as KernelCache.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "cache/kernel_cache.h"

namespace dflash::cache {

struct ExportReport {
  std::int64_t exported = 0;
  std::int64_t skipped_bad = 0;  // entries that failed verification or could not be read are never exported
};

struct ImportReport {
  std::int64_t imported = 0;      // new keys
  std::int64_t replaced = 0;      // the bundle's entry was faster than ours
  std::int64_t kept_ours = 0;     // ours was as fast or faster
  std::vector<std::string> rejected;  // "digest: reason"
};

Result<ExportReport> ExportBundle(KernelCache& cache, const std::filesystem::path& bundle);
Result<ImportReport> ImportBundle(KernelCache& cache, const std::filesystem::path& bundle);

}  // namespace dflash::cache
