// RankEnv: where this process stands in a data-parallel run, read from the torchrun / Slurm-style environment
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT). None of them set: a single process
// (rank 0 of 1). WORLD_SIZE set: RANK, MASTER_ADDR and MASTER_PORT are required too, LOCAL_RANK defaults to RANK.
// Every bad or missing variable is reported by name in one line.
// Who may call: dflash-train (Trainer::Create, the --nproc-per-node launcher) and tests. Thread-safety: pure.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "base/status.h"

namespace dflash::trainer::dist {

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // selects the GPU (cuda:LOCAL_RANK)
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;

  bool distributed() const { return world_size > 1; }
  bool is_main() const { return rank == 0; }
};

// Looks up one environment variable (nullopt: unset). The default reads the process environment.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
std::optional<std::string> ProcessEnv(const char* name);

// InvalidArgument naming the variable for a malformed number, RANK >= WORLD_SIZE, LOCAL_RANK >= LOCAL_WORLD_SIZE,
// a port outside 1..65535, or a missing variable of a multi-process run.
Result<RankEnv> ReadRankEnv(const EnvLookup& env = ProcessEnv);

}  // namespace dflash::trainer::dist
