#include "cache/sqlite_db.h"

#include <random>
#include <thread>

namespace dflash::cache {

Status SqliteStatus(int rc, sqlite3* db, std::string_view what) {
  if (rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE) return Status::Ok();
  const std::string sqlite_text = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  const std::string detail = "SQLite: " + std::string(what) + ": " + sqlite_text;
  // The message says what is wrong in the user's terms; SQLite's statement and text go to the detail.
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return Busy("the database is busy (another process holds its lock)").WithDetail(detail);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return Corruption("the database is damaged").WithDetail(detail);
    case SQLITE_READONLY: return ReadOnlyError("the database cannot be written (" + sqlite_text + ")").WithDetail(detail);
    case SQLITE_FULL: return IoError("the disk is full").WithDetail(detail);
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_PERM: return IoError("the operating system refused a file operation (" + sqlite_text + ")").WithDetail(detail);
    default: return Internal("SQLite failed (" + sqlite_text + ")").WithDetail(detail);
  }
}

Stmt& Stmt::Bind(int i, std::string_view v) {
  sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  return *this;
}
Stmt& Stmt::Bind(int i, std::span<const std::uint8_t> blob) {
  sqlite3_bind_blob64(s_, i, blob.data(), blob.size(), SQLITE_TRANSIENT);
  return *this;
}
Stmt& Stmt::Bind(int i, std::int64_t v) {
  sqlite3_bind_int64(s_, i, v);
  return *this;
}
Stmt& Stmt::Bind(int i, double v) {
  sqlite3_bind_double(s_, i, v);
  return *this;
}

Result<bool> Stmt::Step() {
  int rc = sqlite3_step(s_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteStatus(rc, db_, sqlite3_sql(s_) ? sqlite3_sql(s_) : "step");
}

Status Stmt::Run() {
  while (true) {
    Result<bool> r = Step();
    if (!r.ok()) return r.status();
    if (!*r) return Status::Ok();
  }
}

std::string Stmt::Text(int col) const {
  const unsigned char* p = sqlite3_column_text(s_, col);
  int n = sqlite3_column_bytes(s_, col);
  return p ? std::string(reinterpret_cast<const char*>(p), n) : std::string();
}

std::vector<std::uint8_t> Stmt::Blob(int col) const {
  const void* p = sqlite3_column_blob(s_, col);
  int n = sqlite3_column_bytes(s_, col);
  if (!p || n <= 0) return {};
  const auto* b = static_cast<const std::uint8_t*>(p);
  return std::vector<std::uint8_t>(b, b + n);
}

Result<Db> Db::Open(const std::string& path_or_uri, int flags) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path_or_uri.c_str(), &db, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status st = SqliteStatus(rc, db, "opening " + path_or_uri);
    sqlite3_close_v2(db);
    return st;
  }
  sqlite3_extended_result_codes(db, 0);
  // SQLite's own busy handler waits up to 5 s per statement; WriteTransaction retries beyond that.
  sqlite3_busy_timeout(db, 5000);
  return Db(db);
}

Db& Db::operator=(Db&& o) noexcept {
  if (this != &o) {
    sqlite3_close_v2(db_);
    db_ = o.db_;
    o.db_ = nullptr;
  }
  return *this;
}

Db::~Db() { sqlite3_close_v2(db_); }

Result<Stmt> Db::Prepare(std::string_view sql) {
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &s, nullptr);
  if (rc != SQLITE_OK) return SqliteStatus(rc, db_, "preparing " + std::string(sql.substr(0, 60)));
  return Stmt(db_, s);
}

Status Db::Exec(std::string_view sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, std::string(sql).c_str(), nullptr, nullptr, &err);
  sqlite3_free(err);
  return SqliteStatus(rc, db_, std::string(sql.substr(0, 60)));
}

Result<std::int64_t> Db::QueryInt(std::string_view sql) {
  DFLASH_ASSIGN_OR_RETURN(Stmt s, Prepare(sql));
  DFLASH_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return NotFound("no row for " + std::string(sql));
  return s.Int(0);
}

Status Db::WriteTransaction(const std::function<Status()>& fn, std::chrono::milliseconds budget) {
  const auto deadline = std::chrono::steady_clock::now() + budget;
  std::minstd_rand jitter(std::random_device{}());
  auto pause = std::chrono::milliseconds(1);
  int attempts = 0;
  while (true) {
    ++attempts;
    Status st = Exec("BEGIN IMMEDIATE");
    if (st.ok()) {
      st = fn();
      if (st.ok()) st = Exec("COMMIT");
      if (!st.ok()) Exec("ROLLBACK").ok();  // nothing to do if there is no open transaction
      if (st.ok()) return st;
    }
    if (st.code() != ErrorCode::kBusy) return st;
    if (std::chrono::steady_clock::now() >= deadline) {
      return Busy("database stayed busy for " +
                  std::to_string(std::chrono::duration_cast<std::chrono::seconds>(budget).count()) + " s (" +
                  std::to_string(attempts) + " attempts): " + st.message())
          .WithDetail(st.detail());
    }
    std::this_thread::sleep_for(pause + std::chrono::milliseconds(jitter() % 5));
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

}  // namespace dflash::cache
