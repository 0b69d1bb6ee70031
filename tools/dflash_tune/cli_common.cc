#include "cli_common.h"

#include "cache/schema.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iostream>

namespace dflash::cli {

namespace {
bool g_verbose = false;  // set by OpenCache / FailCache from the global options (one CLI run per process)

void PrintDetail(const Status& status) {
  if (g_verbose && !status.detail().empty()) std::cerr << "dflash-tune: detail: " << status.detail() << "\n";
}
}  // namespace

int Fail(const std::string& context, const Status& status) {
  std::cerr << "dflash-tune: " << context << ": " << status.message() << "\n";
  PrintDetail(status);
  return kExitError;
}

std::filesystem::path CacheDirOf(const GlobalOptions& g) {
  return g.cache_dir.empty() ? cache::DefaultCacheDir() : std::filesystem::path(g.cache_dir);
}

int FailCache(const GlobalOptions& g, const std::string& doing, const Status& status) {
  g_verbose = g.verbose;
  const std::string dir = CacheDirOf(g).string();
  const std::string tool = "dflash-tune --cache-dir " + dir;
  std::string remedy;
  switch (status.code()) {
    case ErrorCode::kCorruption:
      // A database that cannot even be opened (its header or schema page) is past what a repair can read.
      remedy = doing == "open the cache"
                   ? "move " + (CacheDirOf(g) / cache::kDatabaseFile).string() +
                         " aside and run `dflash-tune warmup` to tune afresh (or `" + tool + " import BUNDLE`)"
                   : "run `" + tool + " verify-cache --repair` to save what can be saved";
      break;
    case ErrorCode::kBusy:
      remedy = "another process holds the database: retry when it is done";
      break;
    case ErrorCode::kReadOnly:
      remedy = "make the directory and kernels.db writable, or pass another --cache-dir";
      break;
    case ErrorCode::kIoError:
      remedy = "check the permissions and free space of " + dir;
      break;
    default:
      break;  // our own messages (newer schema, not a directory, network filesystem) already say what to do
  }
  std::cerr << "dflash-tune: cannot " << doing << " (cache " << dir << "): " << status.message()
            << (remedy.empty() ? "" : "; " + remedy) << "\n";
  PrintDetail(status);
  return kExitError;
}

int Fail(const std::string& message) {
  std::cerr << "dflash-tune: " << message << "\n";
  return kExitError;
}

Result<std::unique_ptr<cache::KernelCache>> OpenCache(const GlobalOptions& g, bool create, bool read_only) {
  g_verbose = g.verbose;
  cache::CacheOptions o;
  o.dir = g.cache_dir.empty() ? cache::DefaultCacheDir() : std::filesystem::path(g.cache_dir);
  o.create = create;
  o.read_only = read_only;
  auto c = cache::KernelCache::Open(o);
  if (!c.ok() && c.status().code() == ErrorCode::kNotFound) {
    return NotFound("no cache at " + o.dir.string() + " (run `dflash-tune warmup` to create one, or pass --cache-dir)");
  }
  return c;
}

void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  if (rows.empty()) return;
  std::vector<std::size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.size()));
    for (std::size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  for (std::size_t ri = 0; ri < rows.size(); ++ri) {
    std::string line;
    for (std::size_t i = 0; i < rows[ri].size(); ++i) {
      line += rows[ri][i];
      if (i + 1 < rows[ri].size()) line += std::string(width[i] - rows[ri][i].size() + 2, ' ');
    }
    std::cout << line << "\n";
    if (ri == 0) {
      std::size_t total = 0;
      for (std::size_t i = 0; i < width.size(); ++i) total += width[i] + (i + 1 < width.size() ? 2 : 0);
      std::cout << std::string(total, '-') << "\n";
    }
  }
}

std::string FormatBytes(std::int64_t b) {
  char buf[32];
  if (b >= (1 << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1 << 30));
  } else if (b >= (1 << 20)) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(1 << 20));
  } else if (b >= 1024) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  }
  return buf;
}

std::string FormatTime(std::int64_t t) {
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%SZ", &tm);
  return buf;
}

}  // namespace dflash::cli
