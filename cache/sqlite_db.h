// Thin RAII layer over the SQLite C API for the cache: one connection (Db), prepared statements (Stmt) and
// write transactions with bounded retry on SQLITE_BUSY. Every SQLite error becomes a Status that names the
// statement; SQLITE_CORRUPT/NOTADB map to Corruption, BUSY/LOCKED to Busy.
// Thread-safety: a Db belongs to one thread at a time (KernelCache serialises access with its own mutex).
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dflash::cache {

Status SqliteStatus(int rc, sqlite3* db, std::string_view what);

class Stmt {
 public:
  Stmt(sqlite3* db, sqlite3_stmt* s) : db_(db), s_(s) {}
  Stmt(Stmt&& o) noexcept : db_(o.db_), s_(o.s_) { o.s_ = nullptr; }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt() { sqlite3_finalize(s_); }

  Stmt& Bind(int i, std::string_view v);
  Stmt& Bind(int i, std::span<const std::uint8_t> blob);
  Stmt& Bind(int i, std::int64_t v);
  Stmt& Bind(int i, double v);
  // SQLITE_ROW -> true, SQLITE_DONE -> false, anything else -> error.
  Result<bool> Step();
  Status Run();  // steps to completion

  std::string Text(int col) const;
  std::vector<std::uint8_t> Blob(int col) const;
  std::int64_t Int(int col) const { return sqlite3_column_int64(s_, col); }
  double Real(int col) const { return sqlite3_column_double(s_, col); }
  bool IsNull(int col) const { return sqlite3_column_type(s_, col) == SQLITE_NULL; }
  sqlite3_stmt* get() const { return s_; }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_;
};

class Db {
 public:
  // flags: SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, or SQLITE_OPEN_READONLY (plus SQLITE_OPEN_URI for uris).
  static Result<Db> Open(const std::string& path_or_uri, int flags);
  Db() = default;
  Db(Db&& o) noexcept : db_(o.db_) { o.db_ = nullptr; }
  Db& operator=(Db&& o) noexcept;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  ~Db();

  sqlite3* get() const { return db_; }
  Result<Stmt> Prepare(std::string_view sql);
  Status Exec(std::string_view sql);                 // one or more statements, no results
  Result<std::int64_t> QueryInt(std::string_view sql);  // first column of the first row

  // Runs fn inside BEGIN IMMEDIATE ... COMMIT. SQLITE_BUSY anywhere retries the whole transaction with backoff
  // until `budget` is spent, then returns Busy("database stayed busy for N s ..."). Any other error rolls back.
  Status WriteTransaction(const std::function<Status()>& fn,
                          std::chrono::milliseconds budget = std::chrono::seconds(60));

 private:
  explicit Db(sqlite3* db) : db_(db) {}
  sqlite3* db_ = nullptr;
};

}  // namespace dflash::cache
