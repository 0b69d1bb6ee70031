// Multi-rank tests of trainer/dist on the CPU: RunRanks forks one child process per rank of a fresh rendezvous
// (gloo), CHILD_CHECK fails a child with its line, Values gives every rank's reproducible inputs, HaveGloo says whether
// the build has the gloo backend.
// Who may call: tests/trainer/dist_*_test.cc. Thread-safety: the test's main thread (forks).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "trainer/dist/communicator.h"
#include "trainer/dist/launcher.h"

namespace dflash::trainer::dist::testing {

// Runs body(rank) in `world` child processes of one rendezvous; returns each child's exit code (the body's result,
// 100 + line for a failed check). The parent touches no LibTorch state before forking.
inline std::vector<int> RunRanks(int world, const std::function<int(const RankEnv&)>& body) {
  // Held until every rank has exited: nothing else on the machine (a parallel test's gloo connections) can take the
  // port before rank 0's store binds it.
  auto port = ReserveLocalPort();
  EXPECT_TRUE(port.ok()) << port.status().ToString();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(60);  // a hang kills the child (exit by SIGALRM), it never blocks the suite
      RankEnv env;
      env.rank = env.local_rank = r;
      env.world_size = env.local_world_size = world;
      env.master_addr = "127.0.0.1";
      env.master_port = port->port();
      int code = 1;
      try {
        torch::set_num_threads(1);
        code = body(env);
      } catch (const std::exception& e) {
        fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 99;
      }
      fflush(stderr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

#define CHILD_CHECK(cond)                                                    \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "check failed at line %d: %s\n", __LINE__, #cond);    \
      return 100 + (__LINE__ % 100);                                         \
    }                                                                        \
  } while (0)

// Rank r's values of tensor k: independent of the process (every rank can compute every rank's values).
inline std::vector<double> Values(int rank, int k, std::int64_t n) {
  std::mt19937_64 rng(1000 * rank + k);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

inline bool HaveGloo() {
  // One rank needs no backend; ask for a 2-rank group only to learn whether the build has gloo: a child tries.
  static const int have = [] {
    auto codes = RunRanks(2, [](const RankEnv& env) {
      auto c = Communicator::Create(env, torch::kCPU, std::chrono::seconds(20));
      if (c.ok()) return 0;
      return c.status().code() == ErrorCode::kUnsupported ? 2 : 1;
    });
    return codes[0] == 0 && codes[1] == 0 ? 1 : (codes[0] == 2 ? 0 : -1);
  }();
  EXPECT_NE(have, -1) << "a 2-rank gloo group could not start";
  return have == 1;
}

}  // namespace dflash::trainer::dist::testing
