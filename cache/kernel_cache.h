// KernelCache: the persistent, process-safe store of tuned kernels in one cache directory (format: schema.h).
// Owns: the SQLite connection, the single publish path for entries, artifacts and candidates, the single-flight
// protocol (lookup -> miss -> per-key interprocess lock -> lookup again -> build -> publish in one transaction ->
// unlock), integrity checks on every read (a bad row is a miss plus a quarantine, never a wrong kernel), the
// hit/miss counters and the administration verbs (list, show, stats, verify, evict; export/import in bundle.h).
// Who calls it: the tuner (writes), the trainer and kernel host APIs (reads), the dflash-tune CLI (admin).
// Thread-safety: every method may be called from any thread; calls on one object are serialised internally.
// Any number of processes may open the same directory at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/cache_key.h"
#include "cache/entry.h"
#include "cache/named_lock.h"
#include "cache/sqlite_db.h"
#include "base/status.h"

namespace dflash::cache {

struct CacheOptions {
  std::filesystem::path dir;       // empty: DefaultCacheDir()
  bool read_only = false;          // open read-only even when the directory is writable
  bool allow_network_fs = false;   // also DFLASH_CACHE_ALLOW_NETWORK_FS=1; at your own risk
  bool create = true;              // create the directory and database when missing
  std::chrono::milliseconds busy_budget = std::chrono::seconds(60);
};

// $DFLASH_CACHE_DIR, else $XDG_CACHE_HOME/dflash-tune, else ~/.cache/dflash-tune.
std::filesystem::path DefaultCacheDir();

struct CacheStats {
  std::int64_t entries = 0, artifacts = 0, candidates = 0, quarantined_rows = 0;
  std::int64_t entry_bytes = 0, artifact_bytes = 0;   // cubin bytes
  std::int64_t file_bytes = 0;                        // database + WAL on disk
  std::int64_t hits = 0, misses = 0, quarantined = 0; // counters over all processes (this one's included)
};

struct EntrySummary {
  std::string key_digest, family, arch, signature, config, gpu_name;
  double median_ms = 0;
  std::int64_t cubin_bytes = 0, created_at = 0;
};

struct VerifyProblem {
  std::string table;   // "entries", "artifacts", "database"
  std::string row;     // key digest (or "" for the database)
  std::string what;
};
struct VerifyReport {
  std::int64_t entries_checked = 0, artifacts_checked = 0, loaded = 0;
  std::vector<VerifyProblem> problems;
  std::int64_t repaired = 0;
  bool ok() const { return problems.empty(); }
};

struct EvictFilter {
  std::optional<std::string> family, arch;
  std::optional<std::int64_t> older_than_s;     // created more than this many seconds ago
  std::optional<std::string> stale_nvrtc;       // evict entries whose toolchain differs from this NVRTC version
  bool all = false;
};

class KernelCache {
 public:
  // Opens (creating if allowed) the cache in options.dir. Errors: Unsupported (network filesystem, newer schema),
  // Corruption (garbage or truncated database), IoError (permissions). A directory we cannot write opens
  // read-only: hits are served, nothing is written.
  static Result<std::unique_ptr<KernelCache>> Open(const CacheOptions& options);
  ~KernelCache();  // flushes this process's counters

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path db_path() const;
  bool read_only() const { return read_only_; }
  const std::string& open_note() const { return open_note_; }  // why it is read-only, etc.

  // --- entries -------------------------------------------------------------------------------------------
  // The verified entry for exactly this key, or nullopt. A row failing any check is quarantined (when
  // writable) and reported as a miss.
  Result<std::optional<Entry>> Lookup(const TuningKey& key);
  // The one publish path: the sealed entry and the candidates' results in ONE transaction.
  Status Publish(const Entry& entry, std::span<const CandidateResult> candidates = {});
  struct Built {
    Entry entry;
    bool built_here = false;  // false: someone else (another thread or process) had built or was building it
  };
  // Single flight across threads and processes: `build` runs at most once per key while its result is cached.
  // `candidates`, when given, is read after `build` returns and published in the same transaction as the entry
  // (the build fills it with every candidate's result).
  Result<Built> GetOrBuild(const TuningKey& key, const std::function<Result<Entry>()>& build,
                           const std::vector<CandidateResult>* candidates = nullptr);

  // --- artifacts (compiled variants) ----------------------------------------------------------------------
  Result<std::optional<Artifact>> LookupArtifact(const ArtifactKey& key);
  Status PutArtifact(const Artifact& artifact);
  struct BuiltArtifact {
    Artifact artifact;
    bool built_here = false;
  };
  Result<BuiltArtifact> GetOrBuildArtifact(const ArtifactKey& key, const std::function<Result<Artifact>()>& build);

  // --- candidates -----------------------------------------------------------------------------------------
  Status RecordCandidates(std::span<const CandidateResult> results);
  Result<std::vector<CandidateResult>> Candidates(const std::string& key_digest);

  // --- administration (cache_admin.cc) --------------------------------------------------------------------
  Result<std::vector<EntrySummary>> List();
  // Entry by digest prefix (at least 6 hex chars); NotFound / InvalidArgument when ambiguous.
  Result<Entry> Show(const std::string& digest_prefix);
  Result<CacheStats> Stats();
  // integrity_check + every row's checksums + cubin sanity (+ extra_check per entry, e.g. a GPU load).
  // With repair, bad rows are quarantined so the next verify is clean.
  Result<VerifyReport> Verify(bool repair, const std::function<Status(const Entry&)>& extra_check = nullptr);
  // Number of entries (and artifacts, for family/arch/age/stale/all) removed.
  Result<std::int64_t> Evict(const EvictFilter& filter);
  // Moves one row to the quarantine table with the reason (no-op on a read-only cache).
  Status Quarantine(const std::string& table, const std::string& digest, const std::string& reason);

  // Direct access for bundle import/export (same process, same lock discipline).
  Result<std::vector<Entry>> AllEntries();

 private:
  KernelCache() = default;
  Status FlushCounters();
  Result<std::optional<Entry>> LookupLocked(const TuningKey& key);
  Result<std::optional<Artifact>> LookupArtifactLocked(const ArtifactKey& key);
  Status QuarantineLocked(const std::string& table, const std::string& digest, const std::string& reason);
  Result<NamedLock> LockFor(const std::string& name);

  std::filesystem::path dir_;
  bool read_only_ = false;
  bool empty_ = false;  // read-only view of a database without a schema: every lookup misses
  std::string open_note_;
  std::chrono::milliseconds busy_budget_{60000};
  std::mutex mu_;  // guards db_
  Db db_;
  std::atomic<std::int64_t> hits_{0}, misses_{0}, quarantined_{0};
};

}  // namespace dflash::cache
