// The on-disk format of a cache directory, described once here.
//
//   <dir>/kernels.db        SQLite 3, WAL mode, synchronous=FULL; PRAGMA user_version = schema version.
//   <dir>/kernels.db-wal, -shm   SQLite's write-ahead log and its index (never touch by hand).
//   <dir>/locks/<digest>.lock    per-key single-flight lock files (Boost file_lock; empty; never deleted).
//   <dir>/locks/db-write.lock    held by every write transaction and by a salvage throughout (salvage.h).
//   <dir>/kernels.db.damaged-<UTC time>   a damaged database as it was before a salvage replaced it (kept).
//   <dir>/kernels.db.salvage     the scratch database of a salvage in progress (removed when it ends).
//
// Tables (schema version 1):
//   entries(key_digest PK, family, source_hash, compile_options, arch, nvrtc_version, signature, schema_version,
//           tool_version, config, kernel_names, cubin BLOB, cubin_sha256, median_ms, spread, repetitions, host,
//           gpu_name, sm_count, driver_version, prov_nvrtc_version, prov_tool_version, created_at, tuning_wall_s,
//           checksum)                       -- one winner per tuning key; written in ONE transaction
//   artifacts(artifact_digest PK, family, config, source_hash, compile_options, arch, nvrtc_version,
//           schema_version, tool_version, status, cubin BLOB, cubin_sha256, kernel_names, resources, log,
//           compile_ms, created_at, checksum) -- one compiled variant per (variant, arch, toolchain)
//   candidates(key_digest, config, outcome, median_ms, spread, repetitions, reason, gpu_name, created_at,
//           PRIMARY KEY(key_digest, config)) -- every candidate's result, kept when configs are added later
//   quarantine(id PK, source_table, row_key, reason, quarantined_at, row_json, blob BLOB)
//   counters(name PK, value)              -- hits, misses, quarantined (flushed by each process)
// Checksums: entries.checksum / artifacts.checksum = RowChecksum() (entry.h) over every other column;
// cubin_sha256 = SHA-256 of the blob. Both verified on every read.
// Versions: a database with user_version > kSchemaVersion is refused (never misread); older ones are migrated
// forward by the steps in schema.cc, each in its own transaction.
#pragma once

#include <filesystem>

#include "cache/sqlite_db.h"

namespace dflash::cache {

inline constexpr const char* kDatabaseFile = "kernels.db";

// Checks the raw file before SQLite sees it: a non-empty file must start with the SQLite magic and, with no WAL
// frames beside it, be at least as long as the page count in its header says (catches garbage and truncation with a
// clear reason; with WAL frames, SQLite itself supplies the pages a killed checkpoint had not yet copied).
// *maybe_transient is set when the verdict is "truncated", which a concurrent checkpoint can show briefly.
Status CheckDatabaseFileHeader(const std::filesystem::path& db_path, bool* maybe_transient = nullptr);
// Creates or migrates the schema to kSchemaVersion (read-write connections only).
Status EnsureSchema(Db& db);
// For read-only connections: Ok when the schema version is one we can read.
Status CheckSchemaReadable(Db& db);

}  // namespace dflash::cache
