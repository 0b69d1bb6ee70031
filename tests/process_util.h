// Child processes for the process-level tests (CLI binaries run as real processes, kill -9 included): spawn a binary
// with its output in files and extra environment variables, wait for its exit code, read a file whole.
// Who may call: tests (tests/tuner/cli_runner.h, tests/trainer process tests). Thread-safety: one thread spawns;
// the child only redirects and execs (nothing that allocates between fork and exec).
#pragma once

#include <fcntl.h>
#include <signal.h>  // the tests that use this kill their children
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

extern "C" char** environ;

namespace dflash::testing {

// Starts `binary` with `args`, its stdout and stderr written to the given files ("/dev/null" discards), its
// environment this process's with `extra_env` ("NAME=value") added or overriding. The pid (-1 if fork failed).
inline pid_t SpawnProcess(const std::string& binary, const std::vector<std::string>& args,
                          const std::vector<std::string>& extra_env, const std::string& stdout_path,
                          const std::string& stderr_path) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('=') + 1);
    bool overridden = false;
    for (const auto& x : extra_env) overridden |= x.rfind(name, 0) == 0;
    if (!overridden) env_strings.push_back(entry);
  }
  env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string bin = binary;
  std::vector<std::string> arg_copies = args;
  std::vector<char*> argv{bin.data()};
  for (auto& a : arg_copies) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = ::open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out >= 0) dup2(out, 1);
    const int err = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err >= 0) dup2(err, 2);
    execve(bin.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

// The exit code of `pid`, or 128 + the signal that ended it.
inline int WaitExit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The whole file ("" when it cannot be read).
inline std::string ReadText(const std::filesystem::path& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace dflash::testing
