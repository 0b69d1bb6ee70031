// Salvage of a damaged cache database: every row that still reads back through SQLite and passes its checks is
// copied into a fresh database, which then replaces the live one in ONE write transaction of SQLite's backup API
// (all or nothing, a kill included: the live file holds either the old or the new database, never neither).
// The damaged database is first copied aside as <db>.damaged-<UTC time>, so nothing is thrown away.
// Routes, in order: VACUUM INTO (when SQLite can still read every table; damage in an index or free pages),
// else row by row through the rows FindReachableRows (reachable_rows.h) finds. SQLite's own recovery extension
// (sqlite3_recover) would also read rows under a damaged interior page, but the system SQLite libraries
// (Debian 12, Ubuntu 24.04) are built without the sqlite_dbpage table it needs, so it is not used.
// Rows that read back but fail their checksums are quarantined in the new database; rows that cannot be read
// are recorded there as lost; the next warmup re-tunes exactly those keys.
// Who calls it: KernelCache only, holding its write lock (no other writer commits meanwhile), with no
// transaction open on `live`. Thread-safety: as the Db it is given.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/sqlite_db.h"

namespace dflash::cache {

struct SalvageReport {
  std::filesystem::path kept_aside;  // the damaged database, as it was
  std::string route;                 // "VACUUM INTO" or "row by row"
  std::int64_t rows_saved = 0;       // over every table
  std::vector<std::string> lost;     // rows that could not be read: "entries 3fa9...: unreadable (damaged page)"
  std::vector<std::string> damaged;  // b-trees a damaged page cut short: "candidates: the table's b-tree ..."
  std::vector<std::string> dropped;  // read back but failed their checks: quarantined in the new database
  std::string Summary() const;       // one line
};

Result<SalvageReport> SalvageDatabase(Db& live, const std::filesystem::path& db_path);

}  // namespace dflash::cache
