// Timing of one kernel variant on one GPU: warm-up launches, then repeated launches timed with CUDA events, the
// L2 cache flushed before each repetition, summarized as median and spread; a variant whose spread is too wide is
// measured again and the tightest measurement kept.
// Owns: the timing protocol, the sample statistics and the flush buffer of one Measure call. It does NOT take the
// per-GPU benchmark lock: the caller holds LockDeviceForBenchmark (tuner/device_lock.h) around Measure, so that
// parallel warm-ups never time their kernels against each other.
// Thread-safety: no shared mutable state; Measure may run on several threads at once (each with its own stream),
// though timings are only meaningful one per GPU.
#pragma once

#include <cuda.h>

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "tuner/gpu_runtime.h"

namespace dflash::tuner {

struct BenchOptions {
  int warmup_launches = 3;     // untimed launches first (clocks up, instruction cache, lazy module loading)
  int repetitions = 25;        // timed launches per measurement
  bool flush_l2 = true;        // memset a 2x-L2 buffer before each timed launch (inputs start cold, like training)
  double max_spread = 0.05;    // re-measure while spread (see SampleStats) exceeds this
  int max_remeasures = 2;      // at most this many extra measurements; the tightest one is kept
  double timeout_ms = 10000.0; // bound on one launch; past it Measure returns Timeout instead of hanging
  std::string label;           // names the kernel/variant in error messages
};

// Statistics of one set of samples. Percentiles interpolate linearly between order statistics (numpy's default:
// rank p·(n−1)), so the median of an even count is the mean of the two middle samples.
// spread = (p90 − p10) / median: the width of the central 80 % of samples relative to the typical time; robust to
// one outlier launch on either side, unlike (max − min). 0 for a single sample; +inf when the median is 0 but the
// samples differ.
struct SampleStats {
  double median_ms = 0.0;
  double p10_ms = 0.0;
  double p90_ms = 0.0;
  double min_ms = 0.0;
  double spread = 0.0;
};

struct Measurement {
  double median_ms = 0.0;
  double spread = 0.0;
  int repetitions = 0;  // samples in the kept measurement
  int remeasures = 0;   // extra measurements taken because the spread was too wide (0..max_remeasures)
  std::vector<float> samples;  // per-repetition milliseconds of the kept measurement, in launch order
};

// Pure: InvalidArgument for no samples or a negative/NaN sample.
Result<SampleStats> Summarize(std::span<const float> samples);

// Pure: InvalidArgument naming the first bad field (repetitions < 1, warmup < 0, max_remeasures < 0,
// timeout_ms <= 0, max_spread < 0 or NaN).
Status ValidateOptions(const BenchOptions& options);

// The re-measure policy on its own: calls `sample` (one measurement's samples), and again while the spread
// exceeds options.max_spread, at most options.max_remeasures more times; keeps the tightest. Errors from
// `sample` are returned as they are. Measure uses this; tests drive it with synthetic samples.
Result<Measurement> MeasureWithSampler(const std::function<Result<std::vector<float>>()>& sample,
                                       const BenchOptions& options);

// Times `launch` (which enqueues one run of the kernel on the given stream and returns its Status) on `stream`,
// a stream of `ctx`; makes `ctx` current on the calling thread. Errors: the launch's own Status (with which
// launch it was); LaunchError for a failed driver call or a kernel fault; Timeout when one launch (with its flush)
// has not finished after options.timeout_ms. After a Timeout the kernel may still be running: the stream is left
// as it is and the flush buffer is leaked on purpose (freeing it would wait for the kernel); the caller should
// record the variant as timed out and treat the GPU as busy.
Result<Measurement> Measure(const gpu::Context& ctx, CUstream stream,
                            const std::function<Status(CUstream)>& launch, const BenchOptions& options);

}  // namespace dflash::tuner
