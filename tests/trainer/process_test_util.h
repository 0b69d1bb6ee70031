// dflash-train as a child process for the trainer's process tests: spawn it (stderr to a file, stdout discarded,
// extra environment variables appended), wait for its exit code (128 + signal when killed), read a file whole.
// Who may call: tests/trainer process tests (train_cli_test.cc, dist_train_test.cc). Thread-safety: one thread.
#pragma once

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

namespace dflash::trainer::testing {

// Starts `binary` with `args` and this process's environment plus `extra_env` ("NAME=value").
inline pid_t SpawnProcess(const std::string& binary, std::vector<std::string> args,
                          const std::vector<std::string>& extra_env, const std::filesystem::path& err_file) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.push_back(*e);
  env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string bin = binary;
  std::vector<char*> argv{bin.data()};
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();  // the child's freopen would write the parent's buffered output a second time
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* err = std::freopen(err_file.c_str(), "w", stderr);
    FILE* out = std::freopen("/dev/null", "w", stdout);
    (void)err, (void)out;
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

inline std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace dflash::trainer::testing
