#include "tuner/benchmark.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <utility>

namespace dflash::tuner {
namespace {

// Linear interpolation between order statistics of sorted samples (numpy's default percentile).
double Percentile(const std::vector<double>& sorted, double p) {
  const double pos = p * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = static_cast<std::size_t>(std::ceil(pos));
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

// When L2 size is unknown (attribute 0), flush as if it were 128 MiB (larger than any current GPU's L2).
constexpr std::size_t kFallbackL2Bytes = std::size_t{128} << 20;

// Keeps the flush buffer alive unless a launch timed out: then freeing it (cuMemFree waits for pending work)
// could block forever behind the runaway kernel, so it is leaked instead.
struct LeakIfTimedOut {
  gpu::DeviceBuffer& buffer;
  const bool& timed_out;
  ~LeakIfTimedOut() {
    if (timed_out) (void)buffer.Release();
  }
};

std::string Nth(const char* what, int i, int n) {
  return std::string(what) + " " + std::to_string(i + 1) + " of " + std::to_string(n);
}

}  // namespace

Result<SampleStats> Summarize(std::span<const float> samples) {
  if (samples.empty()) return InvalidArgument("no timing samples to summarize");
  std::vector<double> sorted;
  sorted.reserve(samples.size());
  for (float s : samples) {
    if (!std::isfinite(s) || s < 0.0f) {
      return InvalidArgument("invalid timing sample " + std::to_string(s) + " ms");
    }
    sorted.push_back(s);
  }
  std::sort(sorted.begin(), sorted.end());
  SampleStats st;
  st.median_ms = Percentile(sorted, 0.5);
  st.p10_ms = Percentile(sorted, 0.1);
  st.p90_ms = Percentile(sorted, 0.9);
  st.min_ms = sorted.front();
  const double width = st.p90_ms - st.p10_ms;
  if (st.median_ms > 0.0) {
    st.spread = width / st.median_ms;
  } else {
    st.spread = width == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  }
  return st;
}

Status ValidateOptions(const BenchOptions& o) {
  if (o.repetitions < 1) return InvalidArgument("benchmark repetitions must be >= 1, got " + std::to_string(o.repetitions));
  if (o.warmup_launches < 0) {
    return InvalidArgument("benchmark warm-up launches must be >= 0, got " + std::to_string(o.warmup_launches));
  }
  if (o.max_remeasures < 0) {
    return InvalidArgument("benchmark max_remeasures must be >= 0, got " + std::to_string(o.max_remeasures));
  }
  if (!(o.timeout_ms > 0.0)) return InvalidArgument("benchmark timeout_ms must be > 0");
  if (!(o.max_spread >= 0.0)) return InvalidArgument("benchmark max_spread must be >= 0");
  return Status::Ok();
}

Result<Measurement> MeasureWithSampler(const std::function<Result<std::vector<float>>()>& sample,
                                       const BenchOptions& options) {
  DFLASH_RETURN_IF_ERROR(ValidateOptions(options));
  Measurement best;
  bool have = false;
  for (int attempt = 0; attempt <= options.max_remeasures; ++attempt) {
    DFLASH_ASSIGN_OR_RETURN(std::vector<float> samples, sample());
    DFLASH_ASSIGN_OR_RETURN(SampleStats st, Summarize(samples));
    if (!have || st.spread < best.spread) {
      best.median_ms = st.median_ms;
      best.spread = st.spread;
      best.repetitions = static_cast<int>(samples.size());
      best.samples = std::move(samples);
      have = true;
    }
    best.remeasures = attempt;
    if (st.spread <= options.max_spread) break;
  }
  return best;
}

Result<Measurement> Measure(const gpu::Context& ctx, CUstream stream,
                            const std::function<Status(CUstream)>& launch, const BenchOptions& options) {
  DFLASH_RETURN_IF_ERROR(ValidateOptions(options));
  if (!launch) return InvalidArgument("Measure needs a launch function");
  const std::string label = options.label.empty() ? std::string("kernel") : options.label;
  DFLASH_RETURN_IF_ERROR(ctx.MakeCurrent());
  const std::chrono::duration<double, std::milli> timeout(options.timeout_ms);

  gpu::DeviceBuffer flush;
  if (options.flush_l2) {
    const std::size_t l2 = ctx.info().l2_bytes ? ctx.info().l2_bytes : kFallbackL2Bytes;
    DFLASH_ASSIGN_OR_RETURN(flush, gpu::DeviceBuffer::Alloc(2 * l2, label + " L2 flush buffer"));
  }
  bool timed_out = false;
  LeakIfTimedOut guard{flush, timed_out};
  auto wait = [&](const gpu::Event& e, const std::string& what) -> Status {
    Status st = e.WaitFor(timeout, what);
    if (st.code() == ErrorCode::kTimeout) timed_out = true;
    return st;
  };

  // Warm-up: one launch at a time, each waited for, so a hang shows up here with its own message.
  DFLASH_ASSIGN_OR_RETURN(gpu::Event warm_done, gpu::Event::Create());
  for (int i = 0; i < options.warmup_launches; ++i) {
    DFLASH_RETURN_IF_ERROR(launch(stream).WithContext(Nth("warm-up launch", i, options.warmup_launches)));
    DFLASH_RETURN_IF_ERROR(warm_done.Record(stream));
    DFLASH_RETURN_IF_ERROR(wait(warm_done, label + " " + Nth("warm-up launch", i, options.warmup_launches)));
  }

  const int n = options.repetitions;
  std::vector<gpu::Event> starts, ends;
  starts.reserve(n);
  ends.reserve(n);
  for (int i = 0; i < n; ++i) {
    DFLASH_ASSIGN_OR_RETURN(gpu::Event s, gpu::Event::Create());
    DFLASH_ASSIGN_OR_RETURN(gpu::Event e, gpu::Event::Create());
    starts.push_back(std::move(s));
    ends.push_back(std::move(e));
  }

  // One measurement: enqueue every repetition (flush, start, launch, end) so the GPU runs them back to back,
  // then wait for each end event in order. Each wait's clock starts once the previous repetition is done, so
  // the timeout bounds one launch, not the whole batch.
  auto sample = [&]() -> Result<std::vector<float>> {
    for (int i = 0; i < n; ++i) {
      if (options.flush_l2) DFLASH_RETURN_IF_ERROR(flush.Fill(static_cast<std::uint8_t>(i), stream));
      DFLASH_RETURN_IF_ERROR(starts[i].Record(stream));
      DFLASH_RETURN_IF_ERROR(launch(stream).WithContext(Nth("timed launch", i, n)));
      DFLASH_RETURN_IF_ERROR(ends[i].Record(stream));
    }
    std::vector<float> ms(n);
    for (int i = 0; i < n; ++i) {
      DFLASH_RETURN_IF_ERROR(wait(ends[i], label + " " + Nth("timed launch", i, n)));
      DFLASH_ASSIGN_OR_RETURN(ms[i], gpu::Event::Elapsed(starts[i], ends[i]));
    }
    return ms;
  };
  return MeasureWithSampler(sample, options);
}

}  // namespace dflash::tuner
