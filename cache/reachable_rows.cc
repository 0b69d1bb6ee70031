#include "cache/reachable_rows.h"

#include <set>

namespace dflash::cache {
namespace {

// Steps `s` to its end, handing each row to `row`. A damaged page ends the scan early: returns false then.
// Any other SQLite error is returned.
Result<bool> ScanUntilDamage(Stmt& s, const std::function<void(const Stmt&)>& row) {
  while (true) {
    Result<bool> more = s.Step();
    if (!more.ok()) {
      if (more.status().code() == ErrorCode::kCorruption) return false;
      return more.status();
    }
    if (!*more) return true;
    row(s);
  }
}

std::string Quoted(const std::string& name) { return "\"" + name + "\""; }

}  // namespace

std::string KeySqlOf(const std::string& table) {
  if (table == "entries") return "key_digest";
  if (table == "artifacts") return "artifact_digest";
  if (table == "candidates") return "key_digest || ' ' || config";
  if (table == "counters") return "name";
  return "";
}

Result<ReachableRows> FindReachableRows(Db& db, const std::string& table, const std::string& key_sql) {
  std::set<std::int64_t> ids;
  ReachableRows out;
  const auto add = [&](const Stmt& s) { ids.insert(s.Int(0)); };
  for (const char* order : {"ASC", "DESC"}) {
    DFLASH_ASSIGN_OR_RETURN(Stmt s, db.Prepare("SELECT rowid FROM " + Quoted(table) + " ORDER BY rowid " + order));
    DFLASH_ASSIGN_OR_RETURN(bool complete, ScanUntilDamage(s, add));
    if (!complete && std::string(order) == "ASC") out.damaged.push_back("the table's b-tree");
    if (complete) break;  // a full forward scan saw every row the b-tree holds
  }
  // The index list lives in the schema (page 1), which a database we could open can read.
  DFLASH_ASSIGN_OR_RETURN(Stmt list, db.Prepare("SELECT name, origin FROM pragma_index_list(?)"));
  list.Bind(1, table);
  std::vector<std::pair<std::string, std::string>> indexes;
  while (true) {
    DFLASH_ASSIGN_OR_RETURN(bool row, list.Step());
    if (!row) break;
    indexes.emplace_back(list.Text(0), list.Text(1));
  }
  for (const auto& [name, origin] : indexes) {
    const bool names_rows = origin == "pk" && !key_sql.empty();
    // INDEXED BY makes SQLite read the index alone (it holds every row's rowid and its key columns).
    DFLASH_ASSIGN_OR_RETURN(Stmt s, db.Prepare("SELECT rowid" + (names_rows ? ", " + key_sql : std::string()) +
                                               " FROM " + Quoted(table) + " INDEXED BY " + Quoted(name)));
    DFLASH_ASSIGN_OR_RETURN(bool complete, ScanUntilDamage(s, [&](const Stmt& r) {
                              ids.insert(r.Int(0));
                              if (names_rows) out.keys[r.Int(0)] = r.Text(1);
                            }));
    if (!complete) out.damaged.push_back("its index " + name);
  }
  out.rowids.assign(ids.begin(), ids.end());
  return out;
}

Status ForEachReadableRow(Db& db, const std::string& table, const std::string& columns,
                          const std::function<Status(const Stmt&)>& row, UnreadableRows* unreadable) {
  DFLASH_ASSIGN_OR_RETURN(ReachableRows reach, FindReachableRows(db, table, KeySqlOf(table)));
  for (const std::string& what : reach.damaged) {
    unreadable->emplace_back("", what + " has a damaged page: rows only it reaches cannot be read");
  }
  DFLASH_ASSIGN_OR_RETURN(Stmt s, db.Prepare("SELECT " + columns + " FROM " + Quoted(table) + " WHERE rowid = ?"));
  for (std::int64_t rowid : reach.rowids) {
    sqlite3_reset(s.get());
    s.Bind(1, rowid);
    Result<bool> got = s.Step();
    if (!got.ok() && got.status().code() != ErrorCode::kCorruption) return got.status();
    if (got.ok() && !*got) continue;  // an index naming a row the table no longer has: nothing to read
    if (!got.ok()) {
      auto key = reach.keys.find(rowid);
      unreadable->emplace_back(key != reach.keys.end() ? key->second : "rowid " + std::to_string(rowid),
                               "unreadable (damaged page)");
      continue;
    }
    DFLASH_RETURN_IF_ERROR(row(s));
  }
  return Status::Ok();
}

}  // namespace dflash::cache
