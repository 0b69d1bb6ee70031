#include "cache/salvage.h"

#include <unistd.h>

#include <ctime>

#include "cache/reachable_rows.h"
#include "cache/rows.h"
#include "cache/schema.h"

namespace dflash::cache {
namespace {

// Every table of the schema, in the order they are copied.
constexpr const char* kTables[] = {"entries", "artifacts", "candidates", "quarantine", "counters"};

std::string UtcStamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

void RemoveDatabaseFiles(const std::filesystem::path& p) {
  std::error_code ec;
  for (const char* suffix : {"", "-journal", "-wal", "-shm"}) std::filesystem::remove(p.string() + suffix, ec);
}

// Copies every page of `from` into `to` in one step of SQLite's backup API (one write transaction on `to`).
// Pages are copied as they are, without being parsed, so a damaged database can be copied too.
Status Backup(Db& from, Db& to, const std::string& what) {
  for (int attempt = 0;; ++attempt) {
    sqlite3_backup* b = sqlite3_backup_init(to.get(), "main", from.get(), "main");
    if (!b) return SqliteStatus(sqlite3_errcode(to.get()), to.get(), what);
    const int rc = sqlite3_backup_step(b, -1);
    const int finish = sqlite3_backup_finish(b);
    if (rc == SQLITE_DONE && finish == SQLITE_OK) return Status::Ok();
    const int err = rc == SQLITE_DONE ? finish : rc;
    if ((err == SQLITE_BUSY || err == SQLITE_LOCKED) && attempt < 600) {
      ::usleep(100000);
      continue;
    }
    return SqliteStatus(err, to.get(), what);
  }
}

Status CopyAside(Db& live, const std::filesystem::path& aside) {
  const std::filesystem::path tmp = aside.string() + ".partial";
  RemoveDatabaseFiles(tmp);
  {
    DFLASH_ASSIGN_OR_RETURN(Db copy, Db::Open(tmp.string(), SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE));
    DFLASH_RETURN_IF_ERROR(Backup(live, copy, "copying the damaged database aside"));
    (void)copy.Exec("PRAGMA journal_mode=DELETE");  // one self-contained file
  }
  std::error_code ec;
  std::filesystem::rename(tmp, aside, ec);
  if (ec) return IoError("cannot keep the damaged database aside as " + aside.string() + ": " + ec.message());
  return Status::Ok();
}

// Copies every reachable row of `table` from `live` to `fresh` (same schema), value by value.
Status CopyRowByRow(Db& live, Db& fresh, const std::string& table, SalvageReport* report) {
  DFLASH_ASSIGN_OR_RETURN(ReachableRows reach, FindReachableRows(live, table, KeySqlOf(table)));
  for (const std::string& what : reach.damaged) {
    report->damaged.push_back(table + ": " + what + " has a damaged page; rows only it reached are lost");
  }
  DFLASH_ASSIGN_OR_RETURN(Stmt read, live.Prepare("SELECT * FROM \"" + table + "\" WHERE rowid = ?"));
  const int columns = sqlite3_column_count(read.get());
  std::string marks;
  for (int i = 0; i < columns; ++i) marks += i ? ",?" : "?";
  DFLASH_ASSIGN_OR_RETURN(Stmt write, fresh.Prepare("INSERT OR REPLACE INTO \"" + table + "\" VALUES(" + marks + ")"));
  DFLASH_RETURN_IF_ERROR(fresh.Exec("BEGIN"));
  for (std::int64_t rowid : reach.rowids) {
    sqlite3_reset(read.get());
    read.Bind(1, rowid);
    Result<bool> row = read.Step();
    if (!row.ok() && row.status().code() != ErrorCode::kCorruption) return row.status();
    if (!row.ok() || !*row) {
      auto key = reach.keys.find(rowid);
      const std::string name = key != reach.keys.end() ? key->second : "rowid " + std::to_string(rowid);
      report->lost.push_back(table + " " + name + ": unreadable (damaged page)");
      if (key != reach.keys.end() && (table == "entries" || table == "artifacts")) {
        DFLASH_RETURN_IF_ERROR(RecordLostRow(fresh, table, key->second, "lost to a damaged page (salvaged by repair)"));
      }
      continue;
    }
    sqlite3_reset(write.get());
    for (int i = 0; i < columns; ++i) sqlite3_bind_value(write.get(), i + 1, sqlite3_column_value(read.get(), i));
    DFLASH_RETURN_IF_ERROR(write.Run());
    ++report->rows_saved;
  }
  return fresh.Exec("COMMIT");
}

// Rows of the fresh database that fail the checks every read applies go to its quarantine.
Status QuarantineFailingRows(Db& fresh, SalvageReport* report) {
  std::vector<std::pair<std::string, std::string>> bad[2];  // entries, artifacts: digest, reason
  {
    DFLASH_ASSIGN_OR_RETURN(Stmt s, fresh.Prepare(std::string("SELECT ") + kEntryColumns + " FROM entries"));
    while (true) {
      DFLASH_ASSIGN_OR_RETURN(bool row, s.Step());
      if (!row) break;
      Entry e = EntryFromRow(s);
      const Status st = CheckEntryRow(e, s.Text(0));
      if (!st.ok()) bad[0].emplace_back(s.Text(0), st.message());
    }
    DFLASH_ASSIGN_OR_RETURN(Stmt a, fresh.Prepare(std::string("SELECT ") + kArtifactColumns + " FROM artifacts"));
    while (true) {
      DFLASH_ASSIGN_OR_RETURN(bool row, a.Step());
      if (!row) break;
      Artifact art = ArtifactFromRow(a);
      const Status st = CheckArtifactRow(art, a.Text(0));
      if (!st.ok()) bad[1].emplace_back(a.Text(0), st.message());
    }
  }
  DFLASH_RETURN_IF_ERROR(fresh.Exec("BEGIN"));
  for (int t = 0; t < 2; ++t) {
    const std::string table = t == 0 ? "entries" : "artifacts";
    for (const auto& [digest, why] : bad[t]) {
      DFLASH_RETURN_IF_ERROR(QuarantineRow(fresh, table, digest, "repair: " + why));
      report->dropped.push_back(table + " " + digest + ": " + why);
      --report->rows_saved;
    }
  }
  return fresh.Exec("COMMIT");
}

Result<SalvageReport> BuildFresh(Db& live, const std::filesystem::path& fresh_path) {
  SalvageReport report;
  DFLASH_ASSIGN_OR_RETURN(std::int64_t page_size, live.QueryInt("PRAGMA page_size"));
  RemoveDatabaseFiles(fresh_path);
  Status vacuum = live.Exec("VACUUM INTO '" + fresh_path.string() + "'");  // path has no quote: see caller
  if (vacuum.ok()) {
    report.route = "VACUUM INTO";
    DFLASH_ASSIGN_OR_RETURN(Db fresh, Db::Open(fresh_path.string(), SQLITE_OPEN_READWRITE));
    for (const char* table : kTables) {
      DFLASH_ASSIGN_OR_RETURN(std::int64_t n, fresh.QueryInt(std::string("SELECT count(*) FROM ") + table));
      report.rows_saved += n;
    }
    DFLASH_RETURN_IF_ERROR(QuarantineFailingRows(fresh, &report));
    return report;
  }
  if (vacuum.code() != ErrorCode::kCorruption) return vacuum;
  RemoveDatabaseFiles(fresh_path);
  report.route = "row by row";
  DFLASH_ASSIGN_OR_RETURN(Db fresh, Db::Open(fresh_path.string(), SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE));
  // The backup into the live (WAL) database needs equal page sizes; set before the first table exists.
  DFLASH_RETURN_IF_ERROR(fresh.Exec("PRAGMA page_size=" + std::to_string(page_size)));
  DFLASH_RETURN_IF_ERROR(fresh.Exec("PRAGMA synchronous=OFF"));  // a scratch file until it is copied in
  DFLASH_RETURN_IF_ERROR(EnsureSchema(fresh));
  for (const char* table : kTables) DFLASH_RETURN_IF_ERROR(CopyRowByRow(live, fresh, table, &report));
  DFLASH_RETURN_IF_ERROR(QuarantineFailingRows(fresh, &report));
  return report;
}

}  // namespace

std::string SalvageReport::Summary() const {
  std::string s = "repaired the damaged database (" + route + "): " + std::to_string(rows_saved) + " rows saved, " +
                  std::to_string(lost.size()) + " unreadable rows lost, " + std::to_string(dropped.size()) +
                  " failed their checks and were quarantined; the damaged file is kept as " + kept_aside.string();
  return s;
}

Result<SalvageReport> SalvageDatabase(Db& live, const std::filesystem::path& db_path) {
  if (db_path.string().find('\'') != std::string::npos) {
    return InvalidArgument("cannot repair a cache whose path holds a quote character: " + db_path.string());
  }
  // Copies aside that a killed repair left half-written.
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(db_path.parent_path(), ec)) {
    const std::string name = f.path().filename().string();
    if (name.rfind(db_path.filename().string() + ".damaged-", 0) == 0 && name.find(".partial") != std::string::npos) {
      std::filesystem::remove(f.path(), ec);
    }
  }
  std::filesystem::path aside = db_path.string() + ".damaged-" + UtcStamp();
  if (std::filesystem::exists(aside)) aside += "-" + std::to_string(::getpid());
  DFLASH_RETURN_IF_ERROR(CopyAside(live, aside).WithContext("repairing " + db_path.string()));
  const std::filesystem::path fresh_path = db_path.string() + ".salvage";
  Result<SalvageReport> report = BuildFresh(live, fresh_path);
  if (!report.ok()) {
    RemoveDatabaseFiles(fresh_path);
    return report.status().WithContext("repairing " + db_path.string() + " (nothing was changed)");
  }
  report->kept_aside = aside;
  Status swapped = [&]() -> Status {
    DFLASH_ASSIGN_OR_RETURN(Db fresh, Db::Open(fresh_path.string(), SQLITE_OPEN_READWRITE));
    DFLASH_ASSIGN_OR_RETURN(Stmt ic, fresh.Prepare("PRAGMA integrity_check"));
    DFLASH_ASSIGN_OR_RETURN(bool row, ic.Step());
    if (!row || ic.Text(0) != "ok") return Internal("the salvaged database fails integrity_check: " + ic.Text(0));
    return Backup(fresh, live, "swapping the salvaged database in");
  }();
  RemoveDatabaseFiles(fresh_path);
  if (!swapped.ok()) return swapped.WithContext("repairing " + db_path.string());
  return report;
}

}  // namespace dflash::cache
