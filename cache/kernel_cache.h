// KernelCache: the persistent, process-safe store of tuned kernels in one cache directory (format: schema.h).
// Owns: the SQLite connection, the single publish path for entries, artifacts and candidates, the single-flight
// protocol (lookup -> miss -> per-key interprocess lock -> lookup again -> build -> publish in one transaction ->
// unlock), integrity checks on every read (a bad row, or one SQLite cannot read, is a miss plus a quarantine, never
// a wrong kernel and never an error), self-healing (a write that meets a damaged page salvages the database,
// salvage.h, and retries), the hit/miss counters and the administration verbs (list, show, stats, verify, evict;
// export/import in bundle.h). Every write transaction holds the cache's "db-write" lock (locks/), which a
// salvage holds throughout, so no write can slip in between its copy and its swap.
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
#include "cache/salvage.h"
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
  std::int64_t entries_checked = 0, artifacts_checked = 0, candidates_checked = 0, loaded = 0;
  std::vector<VerifyProblem> problems;
  std::int64_t repaired = 0;                 // rows quarantined (or, with a salvage, the problems it resolved)
  std::optional<SalvageReport> salvage;      // --repair of a database with damaged pages
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
  // Publishes `entry` unless a sound entry for its key is already as fast or faster; the comparison and the
  // write are one transaction, so two processes publishing one key at once keep the faster entry.
  enum class Merge { kNew, kReplaced, kKeptOurs };
  Result<Merge> PublishUnlessSlower(const Entry& entry);
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
  // Every entry SQLite can still read; *unreadable (when given) counts the rows a damaged page hides.
  Result<std::vector<EntrySummary>> List(std::int64_t* unreadable = nullptr);
  // Entry by digest prefix (at least 6 hex chars); NotFound / InvalidArgument when ambiguous.
  Result<Entry> Show(const std::string& digest_prefix);
  Result<CacheStats> Stats();
  // integrity_check + every row's readability, checksums and cubin sanity (+ extra_check per entry, e.g. a GPU
  // load); a row SQLite cannot read is reported and the check goes on. With repair, bad rows are quarantined and
  // a database with damaged pages is salvaged (salvage.h), so the next verify is clean.
  Result<VerifyReport> Verify(bool repair, const std::function<Status(const Entry&)>& extra_check = nullptr);
  // Number of entries (and artifacts, for family/arch/age/stale/all) removed.
  Result<std::int64_t> Evict(const EvictFilter& filter);
  // Moves one row to the quarantine table with the reason (no-op on a read-only cache).
  Status Quarantine(const std::string& table, const std::string& digest, const std::string& reason);
  // Salvages the database now (what verify --repair does when pages are damaged).
  Result<SalvageReport> Salvage();
  // One line per salvage this object ran on its own (a write met a damaged page), taken once.
  std::vector<std::string> TakeHealNotes();

  // Direct access for bundle import/export (same process, same lock discipline); *unreadable as for List.
  Result<std::vector<Entry>> AllEntries(std::int64_t* unreadable = nullptr);

 private:
  KernelCache() = default;
  Status FlushCounters();
  // The entry sealed, or why it cannot be published (read-only cache, cubin not for its key's arch).
  Result<Entry> SealedForPublish(const Entry& entry) const;
  Result<std::optional<Entry>> LookupLocked(const TuningKey& key);
  Result<std::optional<Artifact>> LookupArtifactLocked(const ArtifactKey& key);
  Status QuarantineLocked(const std::string& table, const std::string& digest, const std::string& reason);
  // A row SQLite cannot read: quarantined by its key, or, when the damage stops even that, the database salvaged.
  Status UnreadableLocked(const std::string& table, const std::string& digest, const std::string& why);
  Result<NamedLock> LockFor(const std::string& name);
  // With mu_ held: `fn` in one write transaction under the db-write lock; a transaction that meets a damaged
  // page salvages the database and runs once more (heal = false: report it instead).
  Status WriteLocked(const std::function<Status()>& fn, bool heal = true);
  Result<SalvageReport> SalvageLocked();  // mu_ and the db-write lock held

  std::filesystem::path dir_;
  bool read_only_ = false;
  bool empty_ = false;  // read-only view of a database without a schema: every lookup misses
  std::string open_note_;
  std::chrono::milliseconds busy_budget_{60000};
  std::mutex mu_;  // guards db_ and heal_notes_
  Db db_;
  std::vector<std::string> heal_notes_;
  std::atomic<std::int64_t> hits_{0}, misses_{0}, quarantined_{0};
};

}  // namespace dflash::cache
