// Shared plumbing of the dflash-tune subcommands: global options, opening the cache, the error-to-exit-code
// rule and small output helpers. Only tools/ turns a Status into an exit code and a one-line message.
// Exit codes: 0 success; 1 the command ran and found problems (verify); 2 it could not run (bad input, cache
// that cannot be opened, missing file, wrong arch).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "cache/kernel_cache.h"
#include "base/status.h"

namespace dflash::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitProblems = 1;
inline constexpr int kExitError = 2;

struct GlobalOptions {
  std::string cache_dir;  // empty: the default (DFLASH_CACHE_DIR, XDG_CACHE_HOME, ~/.cache)
  bool json = false;
  bool verbose = false;   // errors also print the low-level text behind them (SQLite's statement and error)
};

// Prints "dflash-tune: <context>: <message>" on stderr and returns kExitError; with --verbose, the status's
// detail (Status::detail) on a second line.
int Fail(const std::string& context, const Status& status);
int Fail(const std::string& message);
// The error of a cache command, one line: what could not be done, the cache directory, what is wrong in the
// user's terms and the command that fixes it (e.g. `dflash-tune --cache-dir DIR verify-cache --repair`).
int FailCache(const GlobalOptions& g, const std::string& doing, const Status& status);
// The cache directory the global options name.
std::filesystem::path CacheDirOf(const GlobalOptions& g);

// Opens the cache named by the global options. create=false: a missing directory is an error.
Result<std::unique_ptr<cache::KernelCache>> OpenCache(const GlobalOptions& g, bool create, bool read_only = false);

// Fixed-width text table: first row is the header.
void PrintTable(const std::vector<std::vector<std::string>>& rows);
std::string FormatBytes(std::int64_t bytes);
std::string FormatTime(std::int64_t unix_seconds);

// Registers the subcommands of one area on `app`; each sets `*run` to its action when chosen.
using Action = std::function<int()>;
void AddCacheCommands(CLI::App& app, GlobalOptions& g, Action* run);
void AddTunerCommands(CLI::App& app, GlobalOptions& g, Action* run);

}  // namespace dflash::cli
