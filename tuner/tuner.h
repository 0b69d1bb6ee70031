// Tuner: turns one (family, problem) into a tuned winner in the cache, safely from any number of threads and
// processes at once. Per tuning key:
//   1. lookup: a verified winner in the cache ends the work (winners_cached);
//   2. compile: every config the family accepts is compiled on the thread pool, each through the cache's
//      per-artifact single flight (an artifact compiled earlier, by anyone, is reused), never inside a database
//      write lock; compile failures are stored and never retried for the same toolchain;
//   3. prune: the ptxas report against the arch's limits (tuner/arch_limits.h);
//   4. benchmark (only with a GPU of the key's arch): under the cache's per-key single flight and the per-GPU
//      benchmark lock, each candidate proposed by the SearchPlan is loaded, run on poisoned outputs and checked
//      against the family's reference before it is timed; failures are recorded with their reason;
//   5. publish: the winner and every candidate's result in one transaction.
// Who calls it: dflash-tune warmup, dflash-train --tune-missing, tests. Thread-safety: Tune is const and
// re-entrant; all per-call state lives on the stack of the call.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "cache/kernel_cache.h"
#include "tuner/benchmark.h"
#include "tuner/final_round.h"
#include "tuner/gpu_runtime.h"
#include "tuner/kernel_family.h"
#include "tuner/search.h"
#include "tuner/thread_pool.h"

namespace dflash::tuner {

struct TuneOptions {
  std::string arch;            // the arch to tune for ("sm_120")
  bool compile_only = false;   // stop after compile + prune even when a GPU of the arch is present
  bool allow_spills = false;   // keep variants that spill registers
  SearchBudget budget;
  BenchOptions bench;
  FinalRoundOptions final_round;  // the sweep's fastest measured again in turns (final_round.h)
  std::uint64_t seed = 0;      // random inputs and sampling; 0 picks one from the clock
};

struct TuneCounts {
  int compiled = 0;        // variants this process compiled
  int reused = 0;          // variants found already compiled in the cache
  int benchmarked = 0;     // variants timed by this process
  int pruned = 0;          // invalid for the problem (see `invalid`) or over the arch's limits after compiling
  int invalid = 0;         // of `pruned`: rejected by the family's constraints before any compile
  int failed = 0;          // compile errors, launch errors, wrong results, timeouts
  int winners_new = 0;     // keys this process tuned and published
  int winners_cached = 0;  // keys whose winner was already in the cache (or published by another process meanwhile)
  TuneCounts& operator+=(const TuneCounts& o);
};

enum class KeyStatus { kCachedWinner, kNewWinner, kCompiledOnly, kNoValidVariant };
const char* KeyStatusName(KeyStatus s);

struct KeyReport {
  std::string family;
  std::string signature;     // canonical bucketed problem
  std::string key_digest;
  KeyStatus status = KeyStatus::kCompiledOnly;
  std::string winner_config; // for cached/new winners
  double winner_ms = 0.0;
  int variants = 0;          // size of the family's space
  TuneCounts counts;
  std::string note;          // e.g. "timing needs a GPU of arch sm_120"
  double wall_s = 0.0;
};

struct ProgressEvent {
  std::string family;
  std::string stage;  // "compile", "benchmark" or "final" (the final round, final_round.h)
  int done = 0;
  int total = 0;
};
using ProgressFn = std::function<void(const ProgressEvent&)>;

class Tuner {
 public:
  // gpu: the device to benchmark on, or nullptr (compile-only). pool: compile threads (shared by callers).
  Tuner(cache::KernelCache& cache, const gpu::Context* gpu, ThreadPool& pool)
      : cache_(cache), gpu_(gpu), pool_(pool) {}

  Result<KeyReport> Tune(const KernelFamily& family, const Problem& problem, const TuneOptions& options,
                         const ProgressFn& progress = nullptr) const;

 private:
  cache::KernelCache& cache_;
  const gpu::Context* gpu_;
  ThreadPool& pool_;
};

}  // namespace dflash::tuner
