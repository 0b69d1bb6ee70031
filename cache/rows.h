// Internal to cache/: how Entry/Artifact/CandidateResult map to SQL rows and JSON, and how a row read back is
// verified. One place for the column lists, so the publish path and every reader agree.
// Thread-safety: pure functions over a Db the caller serialises.
#pragma once

#include <nlohmann/json.hpp>

#include "cache/entry.h"
#include "cache/sqlite_db.h"

namespace dflash::cache {

extern const char* const kEntryColumns;     // SELECT list matching EntryFromRow
extern const char* const kArtifactColumns;  // SELECT list matching ArtifactFromRow

Entry EntryFromRow(const Stmt& s);
Artifact ArtifactFromRow(const Stmt& s);
Status InsertEntry(Db& db, const Entry& e);        // INSERT OR REPLACE
Status InsertArtifact(Db& db, const Artifact& a);  // INSERT OR REPLACE
Status UpsertCandidate(Db& db, const CandidateResult& c);

// Ok, or Corruption naming the first failed check: digest vs fields, cubin SHA-256, row checksum, and
// (when expected is given) every key field against the key the caller asked for.
Status VerifyEntry(const Entry& e, const std::string& stored_digest, const TuningKey* expected = nullptr);
Status VerifyArtifact(const Artifact& a, const std::string& stored_digest, const ArtifactKey* expected = nullptr);
// Every check a read applies before a row is used: Verify* above, then the cubin's ELF header against the key's
// arch (CheckCubinForArch; an artifact only when it compiled). The one definition of "a sound row".
Status CheckEntryRow(const Entry& e, const std::string& stored_digest, const TuningKey* expected = nullptr);
Status CheckArtifactRow(const Artifact& a, const std::string& stored_digest, const ArtifactKey* expected = nullptr);

// Moves one row of `table` ("entries" or "artifacts") into the quarantine table with the reason, inside the
// caller's write transaction: every text/number column as JSON, the cubin as the blob. A row SQLite cannot read
// (a damaged page) is recorded by its key alone and deleted. Ok when there is no such row, and, with
// only_if_unreadable, when the row reads back (a salvage may have saved it meanwhile).
Status QuarantineRow(Db& db, const std::string& table, const std::string& digest, const std::string& reason,
                     bool only_if_unreadable = false);
// Records a row that is gone (lost to a damaged page) in the quarantine table, so stats and verify can say so.
Status RecordLostRow(Db& db, const std::string& table, const std::string& key, const std::string& reason);

nlohmann::json EntryToJson(const Entry& e, bool with_cubin);
Result<Entry> EntryFromJson(const nlohmann::json& j);  // expects the cubin (base64)
std::string Base64Encode(std::span<const std::uint8_t> bytes);
Result<std::vector<std::uint8_t>> Base64Decode(const std::string& text);

}  // namespace dflash::cache
