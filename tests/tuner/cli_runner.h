// Runs the real dflash-tune binary from tests: synchronously (exit code + stdout) or in the background (pid),
// so process-level guarantees are tested on real processes (kill -9 included). Spawning, waiting and reading are
// tests/process_util.h's (WaitExit, ReadText come with it).
// Who may call: tests/tuner. Thread-safety: one thread.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/process_util.h"

namespace dflash::testing {

inline pid_t SpawnCli(const std::vector<std::string>& args, const std::string& stdout_path,
                      const std::vector<std::string>& env = {}) {
  return SpawnProcess(DFLASH_TUNE_BIN, args, env, stdout_path, stdout_path + ".err");
}

struct CliResult {
  int code = -1;
  std::string out, err;
  nlohmann::json json() const { return nlohmann::json::parse(out, nullptr, false); }
};

inline CliResult RunCli(const std::vector<std::string>& args, const std::string& scratch,
                        const std::vector<std::string>& env = {}) {
  CliResult r;
  r.code = WaitExit(SpawnCli(args, scratch, env));
  r.out = ReadText(scratch);
  r.err = ReadText(scratch + ".err");
  return r;
}

}  // namespace dflash::testing
