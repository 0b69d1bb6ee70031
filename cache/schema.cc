#include "cache/schema.h"

#include <array>
#include <cstring>
#include <fstream>
#include <string>

#include "cache/cache_key.h"

namespace dflash::cache {
namespace {

constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE IF NOT EXISTS entries(
  key_digest TEXT PRIMARY KEY, family TEXT NOT NULL, source_hash TEXT NOT NULL, compile_options TEXT NOT NULL,
  arch TEXT NOT NULL, nvrtc_version TEXT NOT NULL, signature TEXT NOT NULL, schema_version INTEGER NOT NULL,
  tool_version TEXT NOT NULL, config TEXT NOT NULL, kernel_names TEXT NOT NULL, cubin BLOB NOT NULL,
  cubin_sha256 TEXT NOT NULL, median_ms REAL NOT NULL, spread REAL NOT NULL, repetitions INTEGER NOT NULL,
  host TEXT NOT NULL, gpu_name TEXT NOT NULL, sm_count INTEGER NOT NULL, driver_version TEXT NOT NULL,
  prov_nvrtc_version TEXT NOT NULL, prov_tool_version TEXT NOT NULL, created_at INTEGER NOT NULL,
  tuning_wall_s REAL NOT NULL, checksum TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS entries_family_arch ON entries(family, arch);
CREATE TABLE IF NOT EXISTS artifacts(
  artifact_digest TEXT PRIMARY KEY, family TEXT NOT NULL, config TEXT NOT NULL, source_hash TEXT NOT NULL,
  compile_options TEXT NOT NULL, arch TEXT NOT NULL, nvrtc_version TEXT NOT NULL, schema_version INTEGER NOT NULL,
  tool_version TEXT NOT NULL, status TEXT NOT NULL, cubin BLOB NOT NULL, cubin_sha256 TEXT NOT NULL,
  kernel_names TEXT NOT NULL, resources TEXT NOT NULL, log TEXT NOT NULL, compile_ms REAL NOT NULL,
  created_at INTEGER NOT NULL, checksum TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS candidates(
  key_digest TEXT NOT NULL, config TEXT NOT NULL, outcome TEXT NOT NULL, median_ms REAL NOT NULL,
  spread REAL NOT NULL, repetitions INTEGER NOT NULL, reason TEXT NOT NULL, gpu_name TEXT NOT NULL,
  created_at INTEGER NOT NULL, PRIMARY KEY(key_digest, config));
CREATE TABLE IF NOT EXISTS quarantine(
  id INTEGER PRIMARY KEY AUTOINCREMENT, source_table TEXT NOT NULL, row_key TEXT NOT NULL, reason TEXT NOT NULL,
  quarantined_at INTEGER NOT NULL, row_json TEXT NOT NULL, blob BLOB);
CREATE TABLE IF NOT EXISTS counters(name TEXT PRIMARY KEY, value INTEGER NOT NULL);
)sql";

// Migration i brings the schema from version i to i+1. Each runs in its own transaction.
constexpr std::array<const char*, 1> kMigrations = {kSchemaV1};
static_assert(kMigrations.size() == kSchemaVersion, "one migration per schema version");

Status RefuseNewer(std::int64_t version) {
  return Unsupported("cache database has schema version " + std::to_string(version) +
                     ", newer than this dflash-tune understands (" + std::to_string(kSchemaVersion) +
                     "); upgrade dflash-tune or use another --cache-dir");
}

}  // namespace

Status CheckDatabaseFileHeader(const std::filesystem::path& db_path, bool* maybe_transient) {
  if (maybe_transient) *maybe_transient = false;
  std::error_code ec;
  if (!std::filesystem::exists(db_path, ec)) return Status::Ok();
  const auto size = std::filesystem::file_size(db_path, ec);
  if (ec) return IoError("cannot read size of " + db_path.string() + ": " + ec.message());
  if (size == 0) return Status::Ok();  // SQLite treats an empty file as a new database
  std::ifstream f(db_path, std::ios::binary);
  if (!f) return IoError("cannot read " + db_path.string() + " (permission denied?)");
  std::array<unsigned char, 100> h{};
  f.read(reinterpret_cast<char*>(h.data()), h.size());
  if (f.gcount() < 100 || std::memcmp(h.data(), "SQLite format 3\0", 16) != 0) {
    return Corruption(db_path.string() + " is not a dflash-tune cache (not an SQLite database: garbage or truncated)");
  }
  std::uint32_t page_size = (h[16] << 8) | h[17];
  if (page_size == 1) page_size = 65536;
  const std::uint32_t pages = (std::uint32_t(h[28]) << 24) | (h[29] << 16) | (h[30] << 8) | h[31];
  const std::uint32_t change = (std::uint32_t(h[24]) << 24) | (h[25] << 16) | (h[26] << 8) | h[27];
  const std::uint32_t valid_for = (std::uint32_t(h[92]) << 24) | (h[93] << 16) | (h[94] << 8) | h[95];
  if (page_size < 512 || (page_size & (page_size - 1)) != 0) {
    return Corruption(db_path.string() + " has an invalid page size in its header");
  }
  if (maybe_transient) *maybe_transient = true;  // from here on, every verdict is about the file's length
  if (size % page_size != 0) {
    return Corruption(db_path.string() + " is truncated (" + std::to_string(size) + " bytes is not a whole number of " +
                      std::to_string(page_size) + "-byte pages)");
  }
  // A checkpoint copies the WAL's pages in page order, page 1 (with the new page count) first: one that was killed
  // before it extended the file leaves a header ahead of the file for good, and SQLite recovers the missing pages
  // from the WAL. So the page count only convicts a file with no WAL frames beside it (a closed cache).
  const auto wal_size = std::filesystem::file_size(db_path.string() + "-wal", ec);
  const bool wal_has_frames = !ec && wal_size > 32;  // more than the WAL header
  if (change == valid_for && static_cast<std::uint64_t>(pages) * page_size > size && !wal_has_frames) {
    return Corruption(db_path.string() + " is truncated (header says " + std::to_string(pages) + " pages, file holds " +
                      std::to_string(size / page_size) + ")");
  }
  return Status::Ok();
}

Status EnsureSchema(Db& db) {
  DFLASH_ASSIGN_OR_RETURN(std::int64_t version, db.QueryInt("PRAGMA user_version"));
  if (version > kSchemaVersion) return RefuseNewer(version);
  while (version < kSchemaVersion) {
    const std::int64_t from = version;
    Status st = db.WriteTransaction([&]() -> Status {
      // Re-read inside the write lock: another process may have migrated meanwhile.
      DFLASH_ASSIGN_OR_RETURN(std::int64_t now, db.QueryInt("PRAGMA user_version"));
      if (now != from) return Status::Ok();
      DFLASH_RETURN_IF_ERROR(db.Exec(kMigrations[from]));
      return db.Exec("PRAGMA user_version = " + std::to_string(from + 1));
    });
    if (!st.ok()) return st.WithContext("migrating cache schema from version " + std::to_string(from));
    DFLASH_ASSIGN_OR_RETURN(version, db.QueryInt("PRAGMA user_version"));
    if (version > kSchemaVersion) return RefuseNewer(version);
  }
  return Status::Ok();
}

Status CheckSchemaReadable(Db& db) {
  DFLASH_ASSIGN_OR_RETURN(std::int64_t version, db.QueryInt("PRAGMA user_version"));
  if (version > kSchemaVersion) return RefuseNewer(version);
  if (version < kSchemaVersion) {
    return Unsupported("cache database has schema version " + std::to_string(version) +
                       " and is read-only here, so it cannot be migrated to " + std::to_string(kSchemaVersion));
  }
  return Status::Ok();
}

}  // namespace dflash::cache
