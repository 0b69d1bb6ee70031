#include "cache/kernel_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "cache/cubin_elf.h"
#include "cache/filesystem_probe.h"
#include "cache/rows.h"
#include "cache/schema.h"

namespace dflash::cache {
namespace {

// file: URI for sqlite3_open_v2 with SQLITE_OPEN_URI; percent-encodes what a URI would misread.
std::string FileUri(const std::filesystem::path& p, const std::string& query) {
  std::string out = "file:";
  for (char c : p.string()) {
    if (c == '?' || c == '#' || c == '%') {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "?" + query;
}

// A read-only open of a database file with mode 0444 in a writable directory makes SQLite create -wal and -shm
// with the file's mode; once the file is writable again they would make every write fail ("attempt to write a
// readonly database"). Gives them the database file's mode again, or says plainly why it cannot.
Status MendSideFiles(const std::filesystem::path& db) {
  struct stat main_st {};
  if (::stat(db.c_str(), &main_st) != 0) return Status::Ok();  // a new database: SQLite creates them itself
  for (const char* suffix : {"-wal", "-shm"}) {
    const std::string side = db.string() + suffix;
    struct stat st {};
    if (::stat(side.c_str(), &st) != 0 || (st.st_mode & S_IWUSR)) continue;
    const mode_t want = (st.st_mode & 07777) | (main_st.st_mode & 0666) | S_IWUSR;
    if (::chmod(side.c_str(), want) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      return ReadOnlyError(side + " is read-only (mode " + mode + ", left by a read-only open) and not ours to " +
                           "change; its owner can run `chmod u+w " + side + "`");
    }
  }
  return Status::Ok();
}

std::string ModeOf(const std::filesystem::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return "?";
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return mode;
}

bool EnvFlag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

}  // namespace

std::filesystem::path DefaultCacheDir() {
  if (const char* d = std::getenv("DFLASH_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::filesystem::path(x) / "dflash-tune";
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home && *home ? home : "/tmp") / ".cache" / "dflash-tune";
}

std::filesystem::path KernelCache::db_path() const { return dir_ / kDatabaseFile; }

Result<std::unique_ptr<KernelCache>> KernelCache::Open(const CacheOptions& options) {
  std::unique_ptr<KernelCache> c(new KernelCache());
  c->dir_ = options.dir.empty() ? DefaultCacheDir() : options.dir;
  c->busy_budget_ = options.busy_budget;
  std::error_code ec;
  const std::string where = "cache directory " + c->dir_.string();
  if (!std::filesystem::is_directory(c->dir_, ec)) {
    std::error_code create_ec;
    if (!std::filesystem::exists(c->dir_, ec)) {
      if (!options.create || options.read_only) return NotFound(where + " does not exist");
      std::filesystem::create_directories(c->dir_, create_ec);
    }
    // Judged after our own attempt to create it: another process may have created it meanwhile.
    if (!std::filesystem::is_directory(c->dir_, ec)) {
      if (create_ec) return IoError("cannot create " + where + ": " + create_ec.message());
      return InvalidArgument(where + " is not a directory");
    }
  }
  DFLASH_ASSIGN_OR_RETURN(FilesystemInfo fs, ProbeFilesystem(c->dir_));
  if (fs.is_network && !options.allow_network_fs && !EnvFlag("DFLASH_CACHE_ALLOW_NETWORK_FS")) {
    return Unsupported(where + " is on " + fs.name +
                       ", a network filesystem where SQLite's WAL locking is unreliable; use a local disk "
                       "(--cache-dir), move tuned caches with export/import, or set "
                       "DFLASH_CACHE_ALLOW_NETWORK_FS=1 at your own risk");
  }
  const std::filesystem::path db = c->db_path();
  // A concurrent checkpoint writes page 1 (with the new page count) before it appends the pages, so a raw
  // header check can briefly see a "truncated" file: only a verdict that persists counts.
  bool transient = false;
  Status header = CheckDatabaseFileHeader(db, &transient);
  for (int attempt = 0; !header.ok() && transient && attempt < 40; ++attempt) {
    ::usleep(50000);
    header = CheckDatabaseFileHeader(db, &transient);
  }
  DFLASH_RETURN_IF_ERROR(header);
  const bool db_exists = std::filesystem::exists(db, ec);
  const bool dir_writable = DirectoryWritable(c->dir_);
  const bool file_writable = !db_exists || ::access(db.c_str(), R_OK | W_OK) == 0;
  bool writable = !options.read_only && dir_writable && file_writable;
  if (!writable && !options.read_only) {
    c->open_note_ = !dir_writable ? "read-only: " + where + " is not writable"
                                  : "read-only: " + db.string() + " is not writable (mode " + ModeOf(db) + ")";
  }
  if (options.read_only) c->open_note_ = "read-only by request";
  if (writable) {
    // Side files a read-only period left unwritable, and not ours to mend: serve hits read-only, and say why.
    if (Status mend = MendSideFiles(db); !mend.ok()) {
      writable = false;
      c->open_note_ = "read-only: " + mend.message();
    }
  }

  if (writable) {
    std::filesystem::create_directories(c->dir_ / "locks", ec);
    if (ec) return IoError("cannot create " + (c->dir_ / "locks").string() + ": " + ec.message());
    DFLASH_ASSIGN_OR_RETURN(c->db_, Db::Open(db.string(), SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE));
    // Cubins are 10 KiB - 1 MiB blobs: 64 KiB pages keep a hit to a few overflow pages. Only takes effect
    // when the database is created (before the first write); existing databases keep their page size.
    DFLASH_RETURN_IF_ERROR(c->db_.Exec("PRAGMA page_size=65536"));
    // SQLite's own wait per statement stays inside the caller's busy budget; WriteTransaction retries beyond it.
    sqlite3_busy_timeout(c->db_.get(), static_cast<int>(std::min<std::int64_t>(options.busy_budget.count(), 5000)));
    // journal_mode=WAL is persistent; setting it needs a brief write lock, retried like any write.
    Status st;
    for (int i = 0; i < 50; ++i) {
      DFLASH_ASSIGN_OR_RETURN(Stmt s, c->db_.Prepare("PRAGMA journal_mode=WAL"));
      Result<bool> row = s.Step();
      st = row.ok() ? Status::Ok() : row.status();
      if (st.ok() && s.Text(0) != "wal") st = Unsupported("cannot switch " + db.string() + " to WAL mode");
      if (st.code() != ErrorCode::kBusy) break;
      ::usleep(100000);
    }
    if (!st.ok()) return st.WithContext("opening " + db.string());
    DFLASH_RETURN_IF_ERROR(c->db_.Exec("PRAGMA synchronous=FULL"));
    if (Status s2 = EnsureSchema(c->db_); !s2.ok()) return s2.WithContext("opening " + db.string());
  } else {
    c->read_only_ = true;
    if (!db_exists) {
      c->empty_ = true;
      return c;
    }
    Result<Db> ro = Db::Open(FileUri(db, "mode=ro"), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
    Result<std::int64_t> version = ro.ok() ? ro->QueryInt("PRAGMA user_version") : Result<std::int64_t>(ro.status());
    if (!version.ok() && version.status().code() != ErrorCode::kCorruption) {
      // A WAL database in a directory we cannot write: SQLite cannot create the -shm index. Open it as
      // immutable instead (what the last checkpoint holds; fine for a read-only consumer).
      ro = Db::Open(FileUri(db, "immutable=1"), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
      version = ro.ok() ? ro->QueryInt("PRAGMA user_version") : Result<std::int64_t>(ro.status());
    }
    if (!version.ok()) return version.status().WithContext("opening " + db.string() + " read-only");
    c->db_ = std::move(*ro);
    if (*version == 0) {
      c->empty_ = true;
      return c;
    }
    DFLASH_RETURN_IF_ERROR(CheckSchemaReadable(c->db_));
  }
  // Reads through mmap: a hit copies the blob straight from the page cache instead of one read() per page.
  (void)c->db_.Exec("PRAGMA mmap_size=2147418112");
  // Touch the schema once so garbage that passed the header check fails here, at open, with a clear error.
  if (Result<std::int64_t> n = c->db_.QueryInt("SELECT count(*) FROM sqlite_master"); !n.ok()) {
    return n.status().WithContext("opening " + db.string());
  }
  return c;
}

KernelCache::~KernelCache() { FlushCounters().ok(); }

Status KernelCache::FlushCounters() {
  if (read_only_ || empty_) return Status::Ok();
  const std::int64_t h = hits_.exchange(0), m = misses_.exchange(0), q = quarantined_.exchange(0);
  if (h == 0 && m == 0 && q == 0) return Status::Ok();
  std::lock_guard<std::mutex> g(mu_);
  Status st = WriteLocked(
      [&]() -> Status {
        for (auto [name, value] : {std::pair{"hits", h}, {"misses", m}, {"quarantined", q}}) {
          DFLASH_ASSIGN_OR_RETURN(Stmt s, db_.Prepare("INSERT INTO counters(name, value) VALUES(?, ?) ON CONFLICT(name) "
                                                      "DO UPDATE SET value = value + excluded.value"));
          s.Bind(1, std::string_view(name)).Bind(2, value);
          DFLASH_RETURN_IF_ERROR(s.Run());
        }
        return Status::Ok();
      },
      /*heal=*/false);  // a destructor's flush never starts a salvage
  if (!st.ok()) {  // keep the counts for the next flush
    hits_ += h;
    misses_ += m;
    quarantined_ += q;
  }
  return st;
}

Result<std::optional<Entry>> KernelCache::Lookup(const TuningKey& key) {
  std::lock_guard<std::mutex> g(mu_);
  Result<std::optional<Entry>> r = LookupLocked(key);
  if (r.ok()) (r->has_value() ? hits_ : misses_)++;
  return r;
}

Result<std::optional<Entry>> KernelCache::LookupLocked(const TuningKey& key) {
  if (empty_) return std::optional<Entry>();
  const std::string digest = key.Digest();
  DFLASH_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(std::string("SELECT ") + kEntryColumns +
                                              " FROM entries WHERE key_digest = ?"));
  for (int attempt = 0;; ++attempt) {
    sqlite3_reset(s.get());
    s.Bind(1, digest);
    Result<bool> row = s.Step();
    if (!row.ok() && row.status().code() == ErrorCode::kCorruption) {  // a damaged page under this row
      if (attempt > 0 || read_only_) {
        ++quarantined_;
        return std::optional<Entry>();
      }
      // Quarantines the row, or salvages the database when even that meets the damage; then reads once more.
      DFLASH_RETURN_IF_ERROR(UnreadableLocked("entries", digest, row.status().message()));
      continue;
    }
    if (!row.ok()) return row.status();
    if (!*row) return std::optional<Entry>();
    Entry e = EntryFromRow(s);
    const Status ok = CheckEntryRow(e, s.Text(0), &key);
    if (!ok.ok()) {
      DFLASH_RETURN_IF_ERROR(QuarantineLocked("entries", digest, ok.message()));
      return std::optional<Entry>();
    }
    return std::optional<Entry>(std::move(e));
  }
}

Result<Entry> KernelCache::SealedForPublish(const Entry& entry) const {
  if (read_only_) return ReadOnlyError("cannot publish to " + dir_.string() + ": " + open_note_);
  Entry sealed = entry;
  sealed.Seal();
  if (Status st = CheckCubinForArch(sealed.cubin, sealed.key.arch); !st.ok()) {
    return InvalidArgument("refusing to publish " + sealed.key.ReadableName() + ": " + st.message());
  }
  return sealed;
}

Status KernelCache::Publish(const Entry& entry, std::span<const CandidateResult> candidates) {
  DFLASH_ASSIGN_OR_RETURN(const Entry sealed, SealedForPublish(entry));
  std::lock_guard<std::mutex> g(mu_);
  return WriteLocked([&]() -> Status {
    DFLASH_RETURN_IF_ERROR(InsertEntry(db_, sealed));
    for (const CandidateResult& c : candidates) DFLASH_RETURN_IF_ERROR(UpsertCandidate(db_, c));
    return Status::Ok();
  });
}

Result<KernelCache::Merge> KernelCache::PublishUnlessSlower(const Entry& entry) {
  DFLASH_ASSIGN_OR_RETURN(const Entry sealed, SealedForPublish(entry));
  const std::string digest = sealed.key.Digest();
  Merge merge = Merge::kNew;
  std::lock_guard<std::mutex> g(mu_);
  Status st = WriteLocked([&]() -> Status {
    merge = Merge::kNew;
    DFLASH_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(std::string("SELECT ") + kEntryColumns +
                                                " FROM entries WHERE key_digest = ?"));
    s.Bind(1, digest);
    DFLASH_ASSIGN_OR_RETURN(bool row, s.Step());  // a damaged page: Corruption, and WriteLocked heals
    if (row) {
      const Entry ours = EntryFromRow(s);
      const Status sound = CheckEntryRow(ours, digest, &sealed.key);
      // A row of ours that fails its checks is no entry at all: the incoming one replaces it.
      if (sound.ok() && ours.timing.median_ms <= sealed.timing.median_ms) {
        merge = Merge::kKeptOurs;
        return Status::Ok();
      }
      merge = Merge::kReplaced;
    }
    return InsertEntry(db_, sealed);
  });
  if (!st.ok()) return st;
  return merge;
}

Result<NamedLock> KernelCache::LockFor(const std::string& name) {
  return NamedLock::Acquire(dir_ / "locks", name);
}

Result<KernelCache::Built> KernelCache::GetOrBuild(const TuningKey& key,
                                                   const std::function<Result<Entry>()>& build,
                                                   const std::vector<CandidateResult>* candidates) {
  DFLASH_ASSIGN_OR_RETURN(std::optional<Entry> hit, Lookup(key));
  if (hit) return Built{std::move(*hit), false};
  if (read_only_) return ReadOnlyError("no entry for " + key.ReadableName() + " and " + open_note_);
  DFLASH_ASSIGN_OR_RETURN(NamedLock lock, LockFor("k-" + key.Digest()));
  {
    std::lock_guard<std::mutex> g(mu_);
    DFLASH_ASSIGN_OR_RETURN(std::optional<Entry> again, LookupLocked(key));
    if (again) {
      ++hits_;
      return Built{std::move(*again), false};
    }
  }
  DFLASH_ASSIGN_OR_RETURN(Entry built, build());
  if (!(built.key == key)) return Internal("build callback returned an entry for another key");
  DFLASH_RETURN_IF_ERROR(candidates ? Publish(built, *candidates) : Publish(built));
  built.Seal();
  return Built{std::move(built), true};
}

Result<std::optional<Artifact>> KernelCache::LookupArtifact(const ArtifactKey& key) {
  std::lock_guard<std::mutex> g(mu_);
  return LookupArtifactLocked(key);
}

Result<std::optional<Artifact>> KernelCache::LookupArtifactLocked(const ArtifactKey& key) {
  if (empty_) return std::optional<Artifact>();
  const std::string digest = key.Digest();
  DFLASH_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(std::string("SELECT ") + kArtifactColumns +
                                              " FROM artifacts WHERE artifact_digest = ?"));
  for (int attempt = 0;; ++attempt) {
    sqlite3_reset(s.get());
    s.Bind(1, digest);
    Result<bool> row = s.Step();
    if (!row.ok() && row.status().code() == ErrorCode::kCorruption) {
      if (attempt > 0 || read_only_) return std::optional<Artifact>();
      DFLASH_RETURN_IF_ERROR(UnreadableLocked("artifacts", digest, row.status().message()));
      continue;
    }
    if (!row.ok()) return row.status();
    if (!*row) return std::optional<Artifact>();
    Artifact a = ArtifactFromRow(s);
    const Status ok = CheckArtifactRow(a, s.Text(0), &key);
    if (!ok.ok()) {
      DFLASH_RETURN_IF_ERROR(QuarantineLocked("artifacts", digest, ok.message()));
      return std::optional<Artifact>();
    }
    return std::optional<Artifact>(std::move(a));
  }
}

Status KernelCache::PutArtifact(const Artifact& artifact) {
  if (read_only_) return ReadOnlyError("cannot store artifacts in " + dir_.string() + ": " + open_note_);
  Artifact sealed = artifact;
  sealed.Seal();
  std::lock_guard<std::mutex> g(mu_);
  return WriteLocked([&]() { return InsertArtifact(db_, sealed); });
}

Result<KernelCache::BuiltArtifact> KernelCache::GetOrBuildArtifact(const ArtifactKey& key,
                                                                   const std::function<Result<Artifact>()>& build) {
  DFLASH_ASSIGN_OR_RETURN(std::optional<Artifact> hit, LookupArtifact(key));
  if (hit) return BuiltArtifact{std::move(*hit), false};
  if (read_only_) {  // nothing can be stored: build for this process only
    DFLASH_ASSIGN_OR_RETURN(Artifact a, build());
    a.Seal();
    return BuiltArtifact{std::move(a), true};
  }
  DFLASH_ASSIGN_OR_RETURN(NamedLock lock, LockFor("a-" + key.Digest()));
  DFLASH_ASSIGN_OR_RETURN(std::optional<Artifact> again, LookupArtifact(key));
  if (again) return BuiltArtifact{std::move(*again), false};
  DFLASH_ASSIGN_OR_RETURN(Artifact a, build());
  if (!(a.key == key)) return Internal("build callback returned an artifact for another key");
  DFLASH_RETURN_IF_ERROR(PutArtifact(a));
  a.Seal();
  return BuiltArtifact{std::move(a), true};
}

Status KernelCache::RecordCandidates(std::span<const CandidateResult> results) {
  if (read_only_) return ReadOnlyError("cannot record candidates in " + dir_.string() + ": " + open_note_);
  std::lock_guard<std::mutex> g(mu_);
  return WriteLocked([&]() -> Status {
    for (const CandidateResult& c : results) DFLASH_RETURN_IF_ERROR(UpsertCandidate(db_, c));
    return Status::Ok();
  });
}

Result<std::vector<CandidateResult>> KernelCache::Candidates(const std::string& key_digest) {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<CandidateResult> out;
  if (empty_) return out;
  DFLASH_ASSIGN_OR_RETURN(Stmt s, db_.Prepare("SELECT key_digest, config, outcome, median_ms, spread, repetitions, "
                                              "reason, gpu_name, created_at FROM candidates WHERE key_digest = ? "
                                              "ORDER BY config"));
  s.Bind(1, key_digest);
  while (true) {
    Result<bool> row = s.Step();
    // Candidates only seed a search: a damaged page loses them (verify reports it), never fails the caller.
    if (!row.ok() && row.status().code() == ErrorCode::kCorruption) return std::vector<CandidateResult>();
    if (!row.ok()) return row.status();
    if (!*row) break;
    CandidateResult c;
    c.key_digest = s.Text(0);
    c.config = s.Text(1);
    if (!OutcomeFromName(s.Text(2), &c.outcome)) continue;  // unknown outcome from a newer tool: skip
    c.timing = {s.Real(3), s.Real(4), static_cast<int>(s.Int(5))};
    c.reason = s.Text(6);
    c.gpu_name = s.Text(7);
    c.created_at = s.Int(8);
    out.push_back(std::move(c));
  }
  return out;
}

Status KernelCache::Quarantine(const std::string& table, const std::string& digest, const std::string& reason) {
  std::lock_guard<std::mutex> g(mu_);
  return QuarantineLocked(table, digest, reason);
}

Status KernelCache::QuarantineLocked(const std::string& table, const std::string& digest, const std::string& reason) {
  ++quarantined_;
  if (read_only_) return Status::Ok();  // cannot move it; the read is still a miss
  return WriteLocked([&]() { return QuarantineRow(db_, table, digest, reason); });
}

Status KernelCache::UnreadableLocked(const std::string& table, const std::string& digest, const std::string& why) {
  ++quarantined_;
  return WriteLocked([&]() {
    return QuarantineRow(db_, table, digest, "unreadable: " + why, /*only_if_unreadable=*/true);
  });
}

Status KernelCache::WriteLocked(const std::function<Status()>& fn, bool heal) {
  DFLASH_ASSIGN_OR_RETURN(NamedLock lock, NamedLock::Acquire(dir_ / "locks", "db-write", busy_budget_));
  Status st = db_.WriteTransaction(fn, busy_budget_);
  if (st.code() != ErrorCode::kCorruption || !heal) return st;
  Result<SalvageReport> healed = SalvageLocked();
  if (!healed.ok()) return st.WithContext("a damaged page stopped a write, and " + healed.status().message());
  heal_notes_.push_back(healed->Summary());
  return db_.WriteTransaction(fn, busy_budget_);
}

Result<SalvageReport> KernelCache::SalvageLocked() { return SalvageDatabase(db_, db_path()); }

Result<SalvageReport> KernelCache::Salvage() {
  if (read_only_) return ReadOnlyError("cannot repair " + dir_.string() + ": " + open_note_);
  if (empty_) return SalvageReport{};
  std::lock_guard<std::mutex> g(mu_);
  DFLASH_ASSIGN_OR_RETURN(NamedLock lock, NamedLock::Acquire(dir_ / "locks", "db-write", busy_budget_));
  return SalvageLocked();
}

std::vector<std::string> KernelCache::TakeHealNotes() {
  std::lock_guard<std::mutex> g(mu_);
  return std::exchange(heal_notes_, {});
}

}  // namespace dflash::cache
