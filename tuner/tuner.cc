#include "tuner/tuner.h"

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <algorithm>
#include <future>
#include <map>
#include <random>

#include "tuner/arch_limits.h"
#include "tuner/device_lock.h"
#include "tuner/final_round.h"
#include "tuner/loaded_kernel.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/tuning_key.h"
#include "tuner/variant_build.h"

namespace dflash::tuner {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
std::int64_t Now() { return static_cast<std::int64_t>(std::time(nullptr)); }

std::string HostName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

cache::CandidateResult Candidate(const std::string& digest, const Config& c, cache::Outcome o,
                                 const std::string& reason, const std::string& gpu) {
  cache::CandidateResult r;
  r.key_digest = digest;
  r.config = ConfigToJson(c);
  r.outcome = o;
  r.reason = reason.substr(0, 4000);
  r.gpu_name = gpu;
  r.created_at = Now();
  return r;
}

bool IsFailure(cache::Outcome o) { return o != cache::Outcome::kOk && o != cache::Outcome::kPruned; }

// One key's benchmark: what is measured (the key, its bucket and the runnable candidates), where and how, and
// what the measurement fills in (every candidate's outcome in `results`, the counts).
struct KeyBenchmark {
  cache::KernelCache& cache;
  const gpu::Context& ctx;
  const KernelFamily& family;
  const Problem& bucket;
  const cache::TuningKey& key;
  const std::vector<CompiledCandidate>& runnable;
  const TuneOptions& options;
  std::uint64_t seed;
  const ProgressFn& progress;
  Clock::time_point started;  // the key's tuning started here (the time budget counts from it)
  TuneCounts& counts;
  std::vector<cache::CandidateResult>& results;
};

// A variant that passed the sweep: its candidate and its row (with its sweep time) in the key's results.
struct Swept {
  const CompiledCandidate* cand;
  std::size_t result_index;
};

struct Settled {
  const CompiledCandidate* winner;
  cache::Timing timing;
};

struct FinalInputs {
  const gpu::Context& ctx;
  CUstream stream;
  Workload& workload;
  const KernelFamily& family;
  const TuneOptions& options;
  const std::vector<Swept>& swept;
  std::vector<cache::CandidateResult>& results;
};

// The final round (final_round.h) among the sweep's fastest variants: the winner, with its final time (the median
// of its rounds; spread the widest of its rounds; repetitions summed). The finalists' rows in `results` get their
// final times, so the winner is the fastest finalist there too. Errors as Measure returns them (a Timeout leaves
// the GPU busy).
Result<Settled> SettleFinal(const FinalInputs& in) {
  std::vector<double> sweep_ms;
  for (const Swept& s : in.swept) sweep_ms.push_back(in.results[s.result_index].timing.median_ms);
  const std::vector<std::size_t> finalists = SelectFinalists(sweep_ms, in.options.final_round);
  std::vector<std::unique_ptr<LoadedKernel>> kernels;
  std::vector<std::string> labels;
  for (std::size_t i : finalists) {
    const CompiledCandidate& c = *in.swept[i].cand;
    labels.push_back(std::string(in.family.name()) + "[" + ConfigLabel(c.config) + "] (final round)");
    DFLASH_ASSIGN_OR_RETURN(auto k, LoadedKernel::Load(c.artifact.cubin, c.artifact.kernel_names, c.config,
                                                       labels.back()));
    kernels.push_back(std::move(k));
  }
  std::vector<cache::Timing> timing(finalists.size());
  auto measure = [&](std::size_t k) -> Result<double> {
    BenchOptions bo = in.options.bench;
    bo.label = labels[k];
    DFLASH_ASSIGN_OR_RETURN(Measurement m,
                            Measure(in.ctx, in.stream,
                                    [&](CUstream s) { return in.workload.Launch(kernels[k]->variant(), s); }, bo));
    timing[k].spread = std::max(timing[k].spread, m.spread);
    timing[k].repetitions += m.repetitions;
    return m.median_ms;
  };
  Result<FinalRoundResult> r = RunFinalRound(finalists.size(), in.options.final_round.rounds, measure);
  if (!r.ok()) {
    // A finalist that never ends may still run: unloading the modules would wait for it (as BenchmarkKey leaves a
    // timed-out candidate's module to the process's exit).
    if (r.status().code() == ErrorCode::kTimeout) {
      for (auto& k : kernels) (void)k.release();
    }
    return r.status();
  }
  for (std::size_t k = 0; k < finalists.size(); ++k) {
    timing[k].median_ms = r->median_ms[k];
    in.results[in.swept[finalists[k]].result_index].timing = timing[k];
  }
  return Settled{in.swept[finalists[r->winner]].cand, timing[r->winner]};
}

// Benchmarks the runnable candidates of one key on its GPU and returns the winning entry; fills `results` with
// every candidate's outcome. Runs under the cache's per-key lock (GetOrBuild) and takes the per-GPU lock.
Result<cache::Entry> BenchmarkKey(const KeyBenchmark& b) {
  cache::KernelCache& cache = b.cache;
  const gpu::Context& ctx = b.ctx;
  const KernelFamily& family = b.family;
  const cache::TuningKey& key = b.key;
  const TuneOptions& options = b.options;
  TuneCounts& counts = b.counts;
  std::vector<cache::CandidateResult>& results = b.results;
  const std::string digest = key.Digest();
  const std::string gpu_name = ctx.info().name;
  std::map<std::string, cache::CandidateResult> previous;
  if (auto prev = cache.Candidates(digest); prev.ok()) {
    for (auto& r : *prev) previous[r.config] = r;
  }
  DFLASH_RETURN_IF_ERROR(ctx.MakeCurrent());
  DFLASH_ASSIGN_OR_RETURN(cache::NamedLock gpu_lock, LockDeviceForBenchmark(ctx.info()));
  DFLASH_ASSIGN_OR_RETURN(gpu::Stream stream, gpu::Stream::Create());
  DFLASH_ASSIGN_OR_RETURN(auto workload, family.MakeWorkload(ctx, b.bucket, b.seed));

  std::map<std::string, const CompiledCandidate*> by_config;
  std::vector<Config> configs;
  for (const auto& c : b.runnable) {
    by_config[ConfigToJson(c.config)] = &c;
    configs.push_back(c.config);
  }
  SearchPlan plan(family.params(), configs, options.budget, b.seed, family.SeedConfigs(b.bucket));
  const int total = static_cast<int>(configs.size());
  int done = 0;
  std::optional<std::pair<const CompiledCandidate*, cache::Timing>> best;
  std::vector<Swept> swept;  // every variant that passed, for the final round
  while (auto next = plan.Next()) {
    if (options.budget.max_seconds > 0 && SecondsSince(b.started) > options.budget.max_seconds) break;
    const std::string cj = ConfigToJson(*next);
    const CompiledCandidate& cand = *by_config.at(cj);
    const std::string label = std::string(family.name()) + "[" + ConfigLabel(*next) + "]";
    cache::CandidateResult result = Candidate(digest, *next, cache::Outcome::kOk, "", gpu_name);
    auto it = previous.find(cj);
    if (it != previous.end() && IsFailure(it->second.outcome)) {
      result = it->second;  // failures are never retried for the same key and toolchain
    } else if (it != previous.end() && it->second.outcome == cache::Outcome::kOk && it->second.gpu_name == gpu_name) {
      result = it->second;  // measured before on this GPU model: keep the measurement
    } else {
      Status st = Status::Ok();
      auto loaded = LoadedKernel::Load(cand.artifact.cubin, cand.artifact.kernel_names, *next, label);
      if (!loaded.ok()) st = loaded.status();
      if (st.ok()) st = workload->PoisonOutputs(stream.get());
      if (st.ok()) st = workload->Launch((*loaded)->variant(), stream.get());
      if (st.ok()) st = stream.SynchronizeWithin(std::chrono::duration<double, std::milli>(options.bench.timeout_ms),
                                              label + " check launch");
      if (st.ok()) st = workload->Check(stream.get());
      if (st.ok()) {
        BenchOptions bo = options.bench;
        bo.label = label;
        auto m = Measure(ctx, stream.get(),
                         [&](CUstream s) { return workload->Launch((*loaded)->variant(), s); }, bo);
        if (m.ok()) {
          result.timing = {m->median_ms, m->spread, m->repetitions};
          ++counts.benchmarked;
        } else {
          st = m.status();
        }
      }
      if (!st.ok()) {
        result.outcome = st.code() == ErrorCode::kMismatch  ? cache::Outcome::kMismatch
                         : st.code() == ErrorCode::kTimeout ? cache::Outcome::kTimeout
                                                            : cache::Outcome::kLaunchFailed;
        result.reason = st.message().substr(0, 4000);
        if (st.code() == ErrorCode::kTimeout) {
          // The kernel may never end, and freeing what it uses (cuMemFree, cuModuleUnload) would wait for it: the
          // workload and the module are left to the process's exit. So is the GPU's benchmark lock: no process may
          // time kernels beside this one (a later Tune on this GPU in this process would wait for it too).
          (void)workload.release();
          if (loaded.ok()) (void)loaded->release();
          (void)new cache::NamedLock(std::move(gpu_lock));
          results.push_back(result);
          return st.WithContext("benchmarking " + label + " (the GPU may still be busy)");
        }
      }
    }
    if (result.outcome == cache::Outcome::kOk) {
      plan.Report(*next, result.timing.median_ms);
      if (!best || result.timing.median_ms < best->second.median_ms) best = {{&cand, result.timing}};
      swept.push_back({&cand, results.size()});
    } else {
      plan.Report(*next, std::nullopt);
      ++counts.failed;
    }
    results.push_back(result);
    if (b.progress) b.progress({std::string(family.name()), "benchmark", ++done, total});
  }
  if (!best) {
    return NotFound("no variant of " + key.ReadableName() + " passed the correctness gate (" +
                    std::to_string(results.size()) + " tried; see `dflash-tune show`/candidates)");
  }
  if (options.final_round.rounds > 0) {
    if (b.progress) b.progress({std::string(family.name()), "final", 0, options.final_round.rounds});
    Result<Settled> settled = SettleFinal({ctx, stream.get(), *workload, family, options, swept, results});
    if (!settled.ok()) {
      if (settled.status().code() == ErrorCode::kTimeout) {  // as above: what the kernel holds is left to the exit
        (void)workload.release();
        (void)new cache::NamedLock(std::move(gpu_lock));
      }
      return settled.status().WithContext("the final round of " + key.ReadableName());
    }
    best = {{settled->winner, settled->timing}};
  }
  cache::Entry e;
  e.key = key;
  e.config = ConfigToJson(best->first->config);
  e.kernel_names = best->first->artifact.kernel_names;
  e.cubin = best->first->artifact.cubin;
  e.timing = best->second;
  e.provenance.host = HostName();
  e.provenance.gpu_name = gpu_name;
  e.provenance.sm_count = ctx.info().sm_count;
  e.provenance.driver_version = std::to_string(ctx.info().driver_version);
  e.provenance.nvrtc_version = NvrtcVersion();
  e.provenance.created_at = Now();
  e.provenance.tuning_wall_s = SecondsSince(b.started);
  return e;
}

}  // namespace

TuneCounts& TuneCounts::operator+=(const TuneCounts& o) {
  compiled += o.compiled;
  reused += o.reused;
  benchmarked += o.benchmarked;
  pruned += o.pruned;
  invalid += o.invalid;
  failed += o.failed;
  winners_new += o.winners_new;
  winners_cached += o.winners_cached;
  return *this;
}

const char* KeyStatusName(KeyStatus s) {
  switch (s) {
    case KeyStatus::kCachedWinner: return "cached";
    case KeyStatus::kNewWinner: return "tuned";
    case KeyStatus::kCompiledOnly: return "compiled-only";
    case KeyStatus::kNoValidVariant: return "no-valid-variant";
  }
  return "?";
}

Result<KeyReport> Tuner::Tune(const KernelFamily& family, const Problem& problem, const TuneOptions& options,
                              const ProgressFn& progress) const {
  const Clock::time_point started = Clock::now();
  if (!IsValidArch(options.arch)) return InvalidArgument("unsupported arch '" + options.arch + "'");
  DFLASH_ASSIGN_OR_RETURN(Problem bucket, family.Bucket(problem));
  const cache::TuningKey key = MakeTuningKey(family, bucket, options.arch);
  KeyReport report;
  report.family = std::string(family.name());
  report.signature = key.signature;
  report.key_digest = key.Digest();
  auto finish = [&](KeyReport r) {
    r.wall_s = SecondsSince(started);
    return r;
  };

  // 1. A verified winner ends the work.
  DFLASH_ASSIGN_OR_RETURN(std::optional<cache::Entry> hit, cache_.Lookup(key));
  if (hit) {
    report.status = KeyStatus::kCachedWinner;
    report.winner_config = hit->config;
    report.winner_ms = hit->timing.median_ms;
    report.counts.winners_cached = 1;
    return finish(report);
  }

  // 2-3. Compile (in parallel, through the artifact single flight) and prune.
  std::vector<Config> space = EnumerateSpace(family);
  report.variants = static_cast<int>(space.size());
  // Each process walks the space in its own order, so concurrent warmups of one key spread over different
  // variants instead of queueing on the same artifact lock.
  std::shuffle(space.begin(), space.end(), std::mt19937_64(std::random_device{}()));
  std::vector<cache::CandidateResult> results;
  std::vector<std::future<Result<CompiledCandidate>>> futures;
  for (const Config& c : space) {
    std::string why = family.InvalidReason(c, bucket);
    if (why.empty()) why = family.ArchInvalidReason(c, options.arch);
    if (!why.empty()) {
      ++report.counts.pruned;
      ++report.counts.invalid;
      results.push_back(Candidate(report.key_digest, c, cache::Outcome::kPruned, why, ""));
      continue;
    }
    futures.push_back(pool_.Submit([this, &family, c, &bucket, &options] {
      return CompileCandidate(cache_, family, c, bucket, options.arch, options.allow_spills);
    }));
  }
  std::vector<CompiledCandidate> runnable;
  Status first_error = Status::Ok();
  int compiled_done = 0;
  for (auto& f : futures) {
    Result<CompiledCandidate> r = f.get();  // wait for every task even after an error (they reference locals)
    if (progress) progress({report.family, "compile", ++compiled_done, static_cast<int>(futures.size())});
    if (!r.ok()) {
      if (first_error.ok()) first_error = r.status();
      continue;
    }
    (r->built_here ? report.counts.compiled : report.counts.reused)++;
    if (r->outcome == cache::Outcome::kOk) {
      runnable.push_back(std::move(*r));
      continue;
    }
    (r->outcome == cache::Outcome::kPruned ? report.counts.pruned : report.counts.failed)++;
    results.push_back(Candidate(report.key_digest, r->config, r->outcome, r->reason, ""));
  }
  if (!first_error.ok()) return first_error;

  // 4-5. Benchmark, check and publish, when a GPU of this arch is here.
  const bool can_time = gpu_ && RunsOn(options.arch, gpu_->info().cc()) && !options.compile_only;
  if (!can_time || runnable.empty()) {
    if (!cache_.read_only() && !results.empty()) DFLASH_RETURN_IF_ERROR(cache_.RecordCandidates(results));
    report.status = runnable.empty() ? KeyStatus::kNoValidVariant : KeyStatus::kCompiledOnly;
    if (runnable.empty()) {
      report.note = "every variant was pruned or failed to compile";
    } else if (options.compile_only) {
      report.note = "compile-only";
    } else {
      report.note = "timing needs a GPU of arch " + options.arch +
                    (gpu_ ? " (this one is " + gpu_->info().arch() + ")" : " (no GPU present)");
    }
    return finish(report);
  }
  std::uint64_t seed = options.seed ? options.seed : std::random_device{}();
  TuneCounts bench_counts;
  auto built = cache_.GetOrBuild(
      key,
      [&]() -> Result<cache::Entry> {
        auto e = BenchmarkKey({cache_, *gpu_, family, bucket, key, runnable, options, seed, progress, started,
                               bench_counts, results});
        if (!e.ok()) cache_.RecordCandidates(results).ok();  // keep what was learned (failures are not retried)
        return e;
      },
      &results);
  report.counts.benchmarked += bench_counts.benchmarked;
  report.counts.failed += bench_counts.failed;
  if (!built.ok()) {
    if (built.status().code() == ErrorCode::kNotFound) {
      report.status = KeyStatus::kNoValidVariant;
      report.note = built.status().message();
      return finish(report);
    }
    return built.status();
  }
  report.status = built->built_here ? KeyStatus::kNewWinner : KeyStatus::kCachedWinner;
  (built->built_here ? report.counts.winners_new : report.counts.winners_cached) = 1;
  report.winner_config = built->entry.config;
  report.winner_ms = built->entry.timing.median_ms;
  return finish(report);
}

}  // namespace dflash::tuner
