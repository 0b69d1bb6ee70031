// The one-host launcher behind `dflash-train --nproc-per-node N`: starts N workers of the same executable with the
// torchrun environment (RANK = LOCAL_RANK = i, WORLD_SIZE = LOCAL_WORLD_SIZE = N, MASTER_ADDR = 127.0.0.1,
// MASTER_PORT = $MASTER_PORT or a port it reserves until they exit), each in its own process group, forwards
// SIGINT/SIGTERM to them, and when one worker fails, stops the others' groups (SIGTERM, then SIGKILL after a grace
// period) and returns the failed worker's exit code.
// Who may call: tools/dflash_train (main thread, before any other thread starts) and tests. Thread-safety: one
// launcher per process (it installs signal handlers while it runs).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "base/status.h"

namespace dflash::trainer::dist {

// argv without `--nproc-per-node N` / `--nproc-per-node=N` (argv[0] dropped too): what each worker receives.
std::vector<std::string> WorkerArguments(int argc, const char* const* argv);

struct LaunchOptions {
  int nproc = 1;
  std::string executable = "/proc/self/exe";
  std::vector<std::string> arguments;          // argv[1...] of every worker
  int master_port = 0;                         // 0: $MASTER_PORT, else a reserved port on 127.0.0.1
  std::chrono::milliseconds grace{30000};      // SIGTERM -> SIGKILL of the survivors after a failure
};

// A TCP port on 127.0.0.1 held for a rendezvous that starts later (in another process): bound with SO_REUSEADDR
// but not listening, from ReserveLocalPort until this object dies. Meanwhile the kernel hands the port to no other
// socket (neither bind to port 0 nor connect() picks a bound port), while the rendezvous server, which sets
// SO_REUSEADDR too (c10d's TCPStore does), can still bind and listen on it. Move-only; closes its socket.
class ReservedPort {
 public:
  ReservedPort() = default;
  ReservedPort(int fd, int port) : fd_(fd), port_(port) {}
  ReservedPort(ReservedPort&& o) noexcept : fd_(o.fd_), port_(o.port_) { o.fd_ = -1; }
  ReservedPort& operator=(ReservedPort&& o) noexcept;
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;
  ~ReservedPort();
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Reserves a free port (see ReservedPort). IoError from the socket.
Result<ReservedPort> ReserveLocalPort();

// Runs the workers to the end. The exit code: 0 when all succeeded, else the first failure's (128 + signal for a
// worker killed by a signal). InvalidArgument for nproc < 1, IoError when a worker cannot be started.
Result<int> LaunchWorkers(const LaunchOptions& options);

}  // namespace dflash::trainer::dist
