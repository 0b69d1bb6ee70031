// KernelCache administration verbs: list, show, stats, verify, evict (declared in kernel_cache.h).
#include <algorithm>
#include <ctime>
#include <tuple>

#include "cache/kernel_cache.h"
#include "cache/reachable_rows.h"
#include "cache/rows.h"
#include "cache/schema.h"

namespace dflash::cache {
namespace {

// Rows known to be unreadable; at least one when only a damaged b-tree page (no row by name) is known.
std::int64_t CountUnreadable(const UnreadableRows& bad) {
  std::int64_t rows = 0;
  for (const auto& [row, what] : bad) rows += row.empty() ? 0 : 1;
  return rows == 0 && !bad.empty() ? 1 : rows;
}

}  // namespace

Result<std::vector<EntrySummary>> KernelCache::List(std::int64_t* unreadable) {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<EntrySummary> out;
  if (unreadable) *unreadable = 0;
  if (empty_) return out;
  // Row by row, so the entries beside a damaged one are still listed (length(cubin) reads no overflow page).
  UnreadableRows bad;
  DFLASH_RETURN_IF_ERROR(ForEachReadableRow(
      db_, "entries", "key_digest, family, arch, signature, config, gpu_name, median_ms, length(cubin), created_at",
      [&](const Stmt& s) {
        out.push_back({s.Text(0), s.Text(1), s.Text(2), s.Text(3), s.Text(4), s.Text(5), s.Real(6), s.Int(7), s.Int(8)});
        return Status::Ok();
      },
      &bad));
  if (unreadable) *unreadable = CountUnreadable(bad);
  std::sort(out.begin(), out.end(), [](const EntrySummary& a, const EntrySummary& b) {
    return std::tie(a.family, a.arch, a.signature) < std::tie(b.family, b.arch, b.signature);
  });
  return out;
}

Result<Entry> KernelCache::Show(const std::string& prefix) {
  if (prefix.size() < 6) return InvalidArgument("give at least 6 hex characters of the entry's digest");
  for (char c : prefix) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return InvalidArgument("'" + prefix + "' is not a hex digest prefix");
  }
  std::lock_guard<std::mutex> g(mu_);
  if (empty_) return NotFound("no entry matches " + prefix + " (cache is empty)");
  DFLASH_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(std::string("SELECT ") + kEntryColumns +
                                              " FROM entries WHERE key_digest >= ? AND key_digest < ? LIMIT 2"));
  s.Bind(1, prefix).Bind(2, prefix + "g");
  DFLASH_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return NotFound("no entry matches " + prefix);
  Entry e = EntryFromRow(s);
  DFLASH_ASSIGN_OR_RETURN(bool second, s.Step());
  if (second) return InvalidArgument("digest prefix " + prefix + " is ambiguous; give more characters");
  return e;
}

Result<CacheStats> KernelCache::Stats() {
  FlushCounters().ok();  // best effort: a busy database only delays the counts
  CacheStats st;
  std::error_code ec;
  for (const char* suffix : {"", "-wal"}) {
    auto size = std::filesystem::file_size(dir_ / (std::string(kDatabaseFile) + suffix), ec);
    if (!ec) st.file_bytes += static_cast<std::int64_t>(size);
  }
  std::lock_guard<std::mutex> g(mu_);
  if (empty_) return st;
  auto q = [&](const char* sql) { return db_.QueryInt(sql); };
  DFLASH_ASSIGN_OR_RETURN(st.entries, q("SELECT count(*) FROM entries"));
  DFLASH_ASSIGN_OR_RETURN(st.artifacts, q("SELECT count(*) FROM artifacts"));
  DFLASH_ASSIGN_OR_RETURN(st.candidates, q("SELECT count(*) FROM candidates"));
  DFLASH_ASSIGN_OR_RETURN(st.quarantined_rows, q("SELECT count(*) FROM quarantine"));
  DFLASH_ASSIGN_OR_RETURN(st.entry_bytes, q("SELECT coalesce(sum(length(cubin)), 0) FROM entries"));
  DFLASH_ASSIGN_OR_RETURN(st.artifact_bytes, q("SELECT coalesce(sum(length(cubin)), 0) FROM artifacts"));
  DFLASH_ASSIGN_OR_RETURN(Stmt s, db_.Prepare("SELECT name, value FROM counters"));
  while (true) {
    DFLASH_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    const std::string name = s.Text(0);
    if (name == "hits") st.hits = s.Int(1);
    if (name == "misses") st.misses = s.Int(1);
    if (name == "quarantined") st.quarantined = s.Int(1);
  }
  // This process's counts that could not be flushed (read-only or busy) still count.
  st.hits += hits_;
  st.misses += misses_;
  st.quarantined += quarantined_;
  return st;
}

Result<VerifyReport> KernelCache::Verify(bool repair, const std::function<Status(const Entry&)>& extra_check) {
  VerifyReport report;
  if (empty_) return report;
  if (repair && read_only_) return ReadOnlyError("cannot repair " + dir_.string() + ": " + open_note_);
  std::vector<std::pair<std::string, std::string>> bad_entries, bad_artifacts;  // digest, reason
  bool damaged_pages = false;  // SQLite itself found damage: only a salvage repairs that
  {
    std::lock_guard<std::mutex> g(mu_);
    DFLASH_ASSIGN_OR_RETURN(Stmt ic, db_.Prepare("PRAGMA integrity_check(20)"));
    while (true) {
      Result<bool> row = ic.Step();
      if (!row.ok() && row.status().code() != ErrorCode::kCorruption) return row.status();
      if (!row.ok()) {
        report.problems.push_back({"database", "", "integrity_check stopped at a damaged page"});
        damaged_pages = true;
        break;
      }
      if (!*row) break;
      if (ic.Text(0) != "ok") {
        // One problem per line of SQLite's report, without its "*** in database main ***" heading.
        std::string text = ic.Text(0);
        for (std::size_t at = 0; at < text.size();) {
          std::size_t end = std::min(text.find('\n', at), text.size());
          const std::string line = text.substr(at, end - at);
          if (!line.empty() && line.rfind("***", 0) != 0) {
            report.problems.push_back({"database", "", "integrity_check: " + line});
          }
          at = end + 1;
        }
        damaged_pages = true;
      }
    }
    const auto unreadable = [&](const std::string& table, const UnreadableRows& rows) {
      for (const auto& [row, what] : rows) report.problems.push_back({table, row, what});
      if (!rows.empty()) damaged_pages = true;
    };
    UnreadableRows lost;
    DFLASH_RETURN_IF_ERROR(ForEachReadableRow(
        db_, "entries", kEntryColumns,
        [&](const Stmt& s) {
          ++report.entries_checked;
          Entry e = EntryFromRow(s);
          const std::string digest = s.Text(0);
          Status st = CheckEntryRow(e, digest);
          if (st.ok() && extra_check) {
            st = extra_check(e);
            if (st.ok()) ++report.loaded;
          }
          if (!st.ok()) bad_entries.emplace_back(digest, st.message());
          return Status::Ok();
        },
        &lost));
    unreadable("entries", lost);
    lost.clear();
    DFLASH_RETURN_IF_ERROR(ForEachReadableRow(
        db_, "artifacts", kArtifactColumns,
        [&](const Stmt& a) {
          ++report.artifacts_checked;
          Artifact art = ArtifactFromRow(a);
          const std::string digest = a.Text(0);
          const Status st = CheckArtifactRow(art, digest);
          if (!st.ok()) bad_artifacts.emplace_back(digest, st.message());
          return Status::Ok();
        },
        &lost));
    unreadable("artifacts", lost);
    lost.clear();
    DFLASH_RETURN_IF_ERROR(ForEachReadableRow(
        db_, "candidates", "key_digest",
        [&](const Stmt&) {
          ++report.candidates_checked;
          return Status::Ok();
        },
        &lost));
    unreadable("candidates", lost);
  }
  for (auto& [d, why] : bad_entries) report.problems.push_back({"entries", d, why});
  for (auto& [d, why] : bad_artifacts) report.problems.push_back({"artifacts", d, why});
  if (!repair) return report;
  if (damaged_pages) {
    // The salvage also quarantines every row that fails its checks, so it resolves every problem found above.
    DFLASH_ASSIGN_OR_RETURN(SalvageReport salvaged, Salvage());
    report.repaired = static_cast<std::int64_t>(report.problems.size());
    report.salvage = std::move(salvaged);
    return report;
  }
  for (auto& [d, why] : bad_entries) {
    DFLASH_RETURN_IF_ERROR(Quarantine("entries", d, "verify: " + why));
    ++report.repaired;
  }
  for (auto& [d, why] : bad_artifacts) {
    DFLASH_RETURN_IF_ERROR(Quarantine("artifacts", d, "verify: " + why));
    ++report.repaired;
  }
  return report;
}

Result<std::int64_t> KernelCache::Evict(const EvictFilter& f) {
  if (read_only_) return ReadOnlyError("cannot evict from " + dir_.string() + ": " + open_note_);
  if (!f.all && !f.family && !f.arch && !f.older_than_s && !f.stale_nvrtc) {
    return InvalidArgument("evict needs a filter (--family, --arch, --older-than, --stale) or --all");
  }
  std::string where = "1=1";
  std::vector<std::string> binds;
  if (f.family) {
    where += " AND family = ?";
    binds.push_back(*f.family);
  }
  if (f.arch) {
    where += " AND arch = ?";
    binds.push_back(*f.arch);
  }
  if (f.older_than_s) {
    where += " AND created_at < ?";
    binds.push_back(std::to_string(static_cast<std::int64_t>(std::time(nullptr)) - *f.older_than_s));
  }
  if (f.stale_nvrtc) {
    where += " AND (nvrtc_version != ? OR tool_version != ? OR schema_version != ?)";
    binds.push_back(*f.stale_nvrtc);
    binds.push_back(ToolVersion());
    binds.push_back(std::to_string(kSchemaVersion));
  }
  std::int64_t removed = 0;
  std::lock_guard<std::mutex> g(mu_);
  Status st = WriteLocked(
      [&]() -> Status {
        removed = 0;
        for (const char* table : {"entries", "artifacts"}) {
          DFLASH_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(std::string("DELETE FROM ") + table + " WHERE " + where));
          for (std::size_t i = 0; i < binds.size(); ++i) s.Bind(static_cast<int>(i + 1), binds[i]);
          DFLASH_RETURN_IF_ERROR(s.Run());
          if (std::string(table) == "entries") removed = sqlite3_changes(db_.get());
        }
        return Status::Ok();
      });
  if (!st.ok()) return st;
  return removed;
}

Result<std::vector<Entry>> KernelCache::AllEntries(std::int64_t* unreadable) {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<Entry> out;
  if (unreadable) *unreadable = 0;
  if (empty_) return out;
  UnreadableRows bad;
  DFLASH_RETURN_IF_ERROR(ForEachReadableRow(
      db_, "entries", kEntryColumns,
      [&](const Stmt& s) {
        out.push_back(EntryFromRow(s));
        return Status::Ok();
      },
      &bad));
  if (unreadable) *unreadable = CountUnreadable(bad);
  return out;
}

}  // namespace dflash::cache
