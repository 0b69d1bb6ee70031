// Runs the real dflash-tune binary from tests: synchronously (exit code + stdout) or in the background (pid),
// so process-level guarantees are tested on real processes (kill -9 included).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dflash::testing {

inline pid_t SpawnCli(const std::vector<std::string>& args, const std::string& stdout_path,
                      const std::vector<std::string>& env = {}) {
  pid_t pid = fork();
  if (pid == 0) {
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    int out = ::open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out >= 0) dup2(out, 1);
    int err = ::open((stdout_path + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err >= 0) dup2(err, 2);
    std::vector<char*> argv;
    std::string bin = DFLASH_TUNE_BIN;
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

inline int WaitExit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline std::string ReadText(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
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
