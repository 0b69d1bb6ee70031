// The one-host launcher behind `dflash-train --nproc-per-node N`: starts N workers of the same executable with the
// torchrun environment (RANK = LOCAL_RANK = i, WORLD_SIZE = LOCAL_WORLD_SIZE = N, MASTER_ADDR = 127.0.0.1,
// MASTER_PORT = $MASTER_PORT or a free port), each in its own process group, forwards SIGINT/SIGTERM to them, and when
// one worker fails, stops the others' groups (SIGTERM, then SIGKILL after a grace period) and returns the failed
// worker's exit code.
// Who may call: tools/dflash_train (main thread, before any other thread starts) and tests. Thread-safety: one
// launcher per process (it installs signal handlers while it runs).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "cache/status.h"

namespace dflash::trainer::dist {

// argv without `--nproc-per-node N` / `--nproc-per-node=N` (argv[0] dropped too): what each worker receives.
std::vector<std::string> WorkerArguments(int argc, const char* const* argv);

struct LaunchOptions {
  int nproc = 1;
  std::string executable = "/proc/self/exe";
  std::vector<std::string> arguments;          // argv[1...] of every worker
  int master_port = 0;                         // 0: $MASTER_PORT, else a free port on 127.0.0.1
  std::chrono::milliseconds grace{30000};      // SIGTERM -> SIGKILL of the survivors after a failure
};

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then released). IoError from the socket.
Result<int> FreeLocalPort();

// Runs the workers to the end. The exit code: 0 when all succeeded, else the first failure's (128 + signal for a
// worker killed by a signal). InvalidArgument for nproc < 1, IoError when a worker cannot be started.
Result<int> LaunchWorkers(const LaunchOptions& options);

}  // namespace dflash::trainer::dist
