// kernel_bench's command line: the options of one benchmark run, their defaults, their registration on a CLI11
// app and their validation. Owns nothing but plain values.
// Who may call it: tools/bench/kernel_bench*.cc. Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "tuner/kernel_family.h"

namespace dflash::bench {

struct BenchArgs {
  std::string family;        // "attention_fwd", "attention_bwd", "gdn", ...
  std::string problem_json;  // the family's problem JSON, as given to `dflash-tune warmup --problem`
  std::string cache_dir;     // empty: the default cache directory
  std::string arch;          // "sm_90": the arch to look up without a GPU; with one, an arch it runs (default its own)
  int device = 0;
  std::uint64_t seed = 1;    // random inputs of the workload (and of --instance-out)
  int warmup = 3;            // untimed launches (or graph replays) first
  int reps = 25;             // timed launches (or graph replays)
  bool graph = false;        // time replays of a CUDA graph of `graph_launches` launches
  int graph_launches = 10;
  bool flush_l2 = true;      // flush L2 before each timed launch / replay
  double max_spread = 0.05;  // re-measure while (p90 - p10) / median exceeds this
  int max_remeasures = 2;
  double timeout_ms = 30000.0;  // bound on one timed launch / replay
  bool check = false;        // compare the outputs with the family's float64 reference once (also after a replay)
  bool resolve_only = false; // look the winner up and print it; needs no GPU with --arch
  bool instance_only = false;  // write --instance-out and stop; needs neither cache nor GPU
  std::string instance_out;  // file for the facts of the random instance (anchors, cu_seqlens, attended pairs)
  std::string config_json;   // time this config (compiled through the cache's artifacts) instead of the winner
};

// Registers every option on `app` (which must outlive nothing: values land in `args`).
void AddBenchOptions(CLI::App& app, BenchArgs& args);

// InvalidArgument naming the first bad option (counts < 1, unknown combination, missing family/problem...).
Status ValidateArgs(const BenchArgs& args);

// The --problem text as a JSON object (InvalidArgument with the parser's message otherwise).
Result<tuner::Problem> ParseProblemText(const std::string& text);

}  // namespace dflash::bench
