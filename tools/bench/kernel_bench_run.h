// One kernel_bench run: resolve a family's tuned winner from the cache (tuner::KernelProvider: it never compiles or
// tunes), build the family's workload (random inputs on the device), optionally check it against the float64
// reference, time it (tuner::Measure: warm-up, CUDA events, L2 flush; or replays of a CUDA graph of several
// launches), and describe the result as one JSON object.
// Who may call it: tools/bench/kernel_bench.cc. Thread-safety: one run per thread; timings are only meaningful one
// per GPU (the caller does not take the tuner's benchmark lock: do not run it beside a warmup on the same GPU).
#pragma once

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "kernel_bench_args.h"

namespace dflash::bench {

// The result line: {family, problem, config, median_ms, spread, reps, graph, peak_extra_bytes, ...}.
// Errors: NotFound for a missing cache or key (the message names the `dflash-tune warmup` command that fills
// it); Mismatch when --check finds the winner's outputs wrong; InvalidArgument for bad input; Unsupported
// without a GPU (except --resolve-only with --arch, and --instance-only).
Result<nlohmann::json> RunKernelBench(const BenchArgs& args);

}  // namespace dflash::bench
