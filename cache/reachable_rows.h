// Which rows of one table SQLite can still reach in a database with damaged pages, found through SQLite alone
// (no page parsing of our own): the table's b-tree scanned forward and backward (each scan stops at the first
// damaged page) and every index of the table scanned for its rowids (an index still names rows whose table pages
// a damaged interior page hides from the scans). Used by verify (to report every unreadable row and go on) and by
// salvage (to copy every row that still reads back).
// Thread-safety: a pure function over a Db the caller serialises.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cache/sqlite_db.h"

namespace dflash::cache {

struct ReachableRows {
  std::vector<std::int64_t> rowids;          // sorted, unique
  std::map<std::int64_t, std::string> keys;  // rowid -> the row's primary key, where the key's index could tell
  std::vector<std::string> damaged;          // what could not be scanned to its end ("the table's b-tree", ...)
};

// key_sql: an expression over the table's primary-key columns ("key_digest"), read from its index; "" for none.
Result<ReachableRows> FindReachableRows(Db& db, const std::string& table, const std::string& key_sql);

// Reads every row of `table` that SQLite can reach, one by one by rowid, as `SELECT <columns> FROM table`;
// a row a damaged page makes unreadable is not handed to `row` but listed in *unreadable as {its key (or
// "rowid N"), why}, and so is each part of the table a damaged page hides, as {"", what}. Other SQLite errors
// are returned.
using UnreadableRows = std::vector<std::pair<std::string, std::string>>;
Status ForEachReadableRow(Db& db, const std::string& table, const std::string& columns,
                          const std::function<Status(const Stmt&)>& row, UnreadableRows* unreadable);

// The key expression of each cache table, as FindReachableRows takes it ("" for tables keyed by rowid).
std::string KeySqlOf(const std::string& table);

}  // namespace dflash::cache
