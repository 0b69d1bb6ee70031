#include "kernel_bench_run.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "cache/kernel_cache.h"
#include "kernel_bench_instance.h"
#include "kernels/common/space_check.h"
#include "kernels/registry.h"
#include "tuner/benchmark.h"
#include "tuner/gpu_runtime.h"
#include "tuner/arch_limits.h"
#include "tuner/kernel_provider.h"
#include "tuner/loaded_kernel.h"
#include "tuner/variant_build.h"
#include "tuner/tuning_key.h"

namespace dflash::bench {
namespace {

using nlohmann::json;

Result<const tuner::KernelFamily*> FindFamily(const std::string& name) {
  if (const tuner::KernelFamily* f = kernels::FindFamily(name)) return f;
  std::string known;
  for (const tuner::KernelFamily* f : kernels::AllFamilies()) known += (known.empty() ? "" : ", ") + std::string(f->name());
  return InvalidArgument("unknown family '" + name + "' (known: " + known + ")");
}

Result<std::unique_ptr<cache::KernelCache>> OpenCache(const std::string& dir) {
  cache::CacheOptions o;
  o.dir = dir.empty() ? cache::DefaultCacheDir() : std::filesystem::path(dir);
  o.create = false;
  auto c = cache::KernelCache::Open(o);
  if (!c.ok() && c.status().code() == ErrorCode::kNotFound) {
    return NotFound("no kernel cache at " + o.dir.string() + " (fill it with `dflash-tune warmup --cache-dir " +
                    o.dir.string() + " --problem FAMILY=JSON`)");
  }
  return c;
}

Result<std::size_t> FreeDeviceBytes() {
  DFLASH_ASSIGN_OR_RETURN(const gpu::DriverApi* api, gpu::Driver());
  std::size_t free = 0, total = 0;
  DFLASH_RETURN_IF_ERROR(gpu::CheckCu(api->MemGetInfo(&free, &total), "cuMemGetInfo"));
  return free;
}

// --resolve-only: the cache entry for (family, bucket, arch), read without loading it.
Result<json> Resolve(const tuner::KernelFamily& family, const tuner::Problem& problem, const tuner::Problem& bucket,
                     cache::KernelCache& cache, const std::string& arch) {
  const cache::TuningKey key = tuner::MakeTuningKey(family, bucket, arch);
  DFLASH_ASSIGN_OR_RETURN(std::optional<cache::Entry> entry, cache.Lookup(key));
  if (!entry) {
    // The same words as tuner::KernelProvider::Get, which the GPU path goes through.
    return NotFound("no tuned kernel for " + key.ReadableName() + " (key " + key.Digest().substr(0, 12) +
                    "); fill it with: " + tuner::WarmupCommandFor(family, problem, arch, cache.dir().string()));
  }
  return json{{"family", family.name()},     {"problem", problem},
              {"bucket", bucket},            {"arch", arch},
              {"key", key.Digest()},         {"config", json::parse(entry->config)},
              {"tuned_ms", entry->timing.median_ms}, {"cubin_sha256", entry->cubin_sha256}};
}

// --config: the config compiled (or its artifact read) through the cache, pruned against the arch's limits as
// warmup prunes, and loaded. Refused when the arch cannot build it; a config the tuner merely skips is allowed.
Result<std::unique_ptr<tuner::LoadedKernel>> LoadConfig(const tuner::KernelFamily& family,
                                                        const tuner::Problem& bucket, cache::KernelCache& cache,
                                                        const std::string& arch, const std::string& config_json) {
  DFLASH_ASSIGN_OR_RETURN(tuner::Config config, tuner::ConfigFromJson(config_json));
  const std::vector<tuner::TunableParam> params = family.params();
  if (const std::string why = kernels::NotInSpaceReason(params, config); !why.empty()) {
    return InvalidArgument("--config is not a point of the space: " + why);
  }
  if (const std::string why = family.ArchInvalidReason(config, arch); !why.empty()) {
    return InvalidArgument("--config " + tuner::ConfigLabel(config) + " does not run on " + arch + ": " + why);
  }
  DFLASH_ASSIGN_OR_RETURN(tuner::CompiledCandidate c,
                          tuner::CompileCandidate(cache, family, config, bucket, arch, /*allow_spills=*/false));
  const std::string label = std::string(family.name()) + "[" + tuner::ConfigLabel(config) + "]";
  if (c.outcome != cache::Outcome::kOk) return InvalidArgument("--config " + label + ": " + c.reason);
  return tuner::LoadedKernel::Load(c.artifact.cubin, c.artifact.kernel_names, config, label);
}

// `st` unchanged unless it is a Timeout: then the kernel may never end, and releasing what it uses (buffers,
// modules, the context) would wait for it, so the process ends here with exit code 2 and the driver reclaims the GPU.
Status ExitIfTimedOut(Status st) {
  if (st.code() != ErrorCode::kTimeout) return st;
  std::cerr << "kernel_bench: " << st.message() << "; exiting without waiting for the kernel\n";
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(2);
}

Status CheckOnce(tuner::Workload& w, const std::function<Status(CUstream)>& run, CUstream stream,
                 const std::string& what, double timeout_ms) {
  DFLASH_RETURN_IF_ERROR(w.PoisonOutputs(stream).WithContext("poisoning outputs before " + what));
  DFLASH_RETURN_IF_ERROR(run(stream).WithContext(what));
  DFLASH_RETURN_IF_ERROR(ExitIfTimedOut(
      gpu::SynchronizeWithin(stream, std::chrono::duration<double, std::milli>(timeout_ms), what)));
  Status st = w.Check(stream);
  if (st.code() == ErrorCode::kMismatch) return Status(ErrorCode::kMismatch, what + " is wrong: " + st.message());
  return st.WithContext("checking " + what);
}

Result<json> RunOnGpu(const BenchArgs& a, const tuner::KernelFamily& family, const tuner::Problem& problem,
                      const tuner::Problem& bucket, cache::KernelCache& cache) {
  DFLASH_ASSIGN_OR_RETURN(gpu::Context ctx, gpu::Context::Primary(a.device));
  // --arch picks another arch this GPU runs (sm_90 on a Hopper GPU: the portable tier's winners alone).
  const std::string arch = a.arch.empty() ? ctx.info().arch() : a.arch;
  if (!tuner::RunsOn(arch, ctx.info().cc())) {
    return InvalidArgument("--arch " + a.arch + " does not run on GPU " + std::to_string(a.device) + " (" +
                           ctx.info().arch() + ")");
  }
  if (a.resolve_only) return Resolve(family, problem, bucket, cache, arch);

  tuner::KernelProvider provider(cache, ctx, arch);
  std::unique_ptr<tuner::LoadedKernel> chosen;  // --config: the variant timed instead of the winner
  tuner::ResolvedKernel winner;
  std::string skipped_by_tuner;
  if (a.config_json.empty()) {
    DFLASH_ASSIGN_OR_RETURN(winner, provider.Get(family, problem));
  } else {
    DFLASH_ASSIGN_OR_RETURN(chosen, LoadConfig(family, bucket, cache, arch, a.config_json));
    winner.variant = &chosen->variant();
    winner.config = a.config_json;
    skipped_by_tuner = family.InvalidReason(chosen->variant().config, bucket);
  }
  const tuner::LoadedVariant& variant = *winner.variant;
  DFLASH_ASSIGN_OR_RETURN(gpu::Stream stream, gpu::Stream::Create());
  DFLASH_RETURN_IF_ERROR(stream.Synchronize());
  DFLASH_ASSIGN_OR_RETURN(std::size_t free_before, FreeDeviceBytes());
  DFLASH_ASSIGN_OR_RETURN(std::unique_ptr<tuner::Workload> w, family.MakeWorkload(ctx, problem, a.seed));
  const std::function<Status(CUstream)> launch = [&](CUstream s) { return w->Launch(variant, s); };

  // The first launch does the workload's one-time setup (workspaces, plans; the backward's forward pass), so it
  // runs before the memory reading and outside any graph capture.
  const std::chrono::duration<double, std::milli> timeout(a.timeout_ms);
  if (a.check) {
    DFLASH_RETURN_IF_ERROR(CheckOnce(*w, launch, stream.get(), "the winner " + variant.label, a.timeout_ms));
  } else {
    DFLASH_RETURN_IF_ERROR(launch(stream.get()).WithContext("first launch of " + variant.label));
  }
  DFLASH_RETURN_IF_ERROR(ExitIfTimedOut(stream.SynchronizeWithin(timeout, "first launch of " + variant.label)));
  DFLASH_ASSIGN_OR_RETURN(std::size_t free_after, FreeDeviceBytes());

  tuner::BenchOptions bo;
  bo.warmup_launches = a.warmup;
  bo.repetitions = a.reps;
  bo.flush_l2 = a.flush_l2;
  bo.max_spread = a.max_spread;
  bo.max_remeasures = a.max_remeasures;
  bo.timeout_ms = a.timeout_ms;
  bo.label = variant.label;
  DFLASH_RETURN_IF_ERROR(tuner::ValidateOptions(bo));

  tuner::Measurement m;
  int per_sample = 1;
  if (a.graph) {
    per_sample = a.graph_launches;
    DFLASH_ASSIGN_OR_RETURN(
        gpu::GraphExec graph,
        gpu::GraphExec::Capture(
            stream.get(),
            [&](CUstream s) -> Status {
              for (int i = 0; i < a.graph_launches; ++i) DFLASH_RETURN_IF_ERROR(launch(s));
              return Status::Ok();
            },
            "graph of " + std::to_string(a.graph_launches) + " launches of " + variant.label));
    const std::function<Status(CUstream)> replay = [&](CUstream s) { return graph.Launch(s); };
    if (a.check) {
      DFLASH_RETURN_IF_ERROR(CheckOnce(*w, replay, stream.get(), "a graph replay of " + variant.label, a.timeout_ms));
    }
    Result<tuner::Measurement> r = tuner::Measure(ctx, stream.get(), replay, bo);
    DFLASH_RETURN_IF_ERROR(ExitIfTimedOut(r.status()));
    m = std::move(*r);
  } else {
    Result<tuner::Measurement> r = tuner::Measure(ctx, stream.get(), launch, bo);
    DFLASH_RETURN_IF_ERROR(ExitIfTimedOut(r.status()));
    m = std::move(*r);
  }
  const double median_ms = m.median_ms / per_sample;
  const double flops = w->Flops();
  json out = {{"family", family.name()},
              {"problem", problem},
              {"config", json::parse(winner.config)},
              {"median_ms", median_ms},
              {"spread", m.spread},
              {"reps", m.repetitions},
              {"remeasures", m.remeasures},
              {"graph", a.graph},
              {"graph_launches", a.graph ? a.graph_launches : 0},
              {"flush_l2", a.flush_l2},
              {"peak_extra_bytes", free_before > free_after ? free_before - free_after : 0},
              {"bytes_touched", w->BytesTouched()},
              {"flops", flops},
              {"tflops", flops > 0 && median_ms > 0 ? flops / (median_ms * 1e-3) / 1e12 : 0.0},
              {"checked", a.check},
              {"seed", a.seed},
              {"tuned_ms", winner.tuned_ms},
              {"key", winner.key_digest},
              {"device", ctx.info().name},
              {"arch", arch}};
  if (!a.config_json.empty()) out["skipped_by_tuner"] = skipped_by_tuner;
  return out;
}

}  // namespace

Result<json> RunKernelBench(const BenchArgs& a) {
  DFLASH_RETURN_IF_ERROR(ValidateArgs(a));
  DFLASH_ASSIGN_OR_RETURN(const tuner::KernelFamily* family, FindFamily(a.family));
  DFLASH_ASSIGN_OR_RETURN(tuner::Problem problem, ParseProblemText(a.problem_json));
  DFLASH_ASSIGN_OR_RETURN(tuner::Problem bucket, family->Bucket(problem));
  if (!a.instance_out.empty()) {
    DFLASH_ASSIGN_OR_RETURN(json facts, InstanceFacts(a.family, problem, a.seed));
    DFLASH_RETURN_IF_ERROR(WriteJsonFile(a.instance_out, facts));
    if (a.instance_only) return json{{"family", a.family}, {"problem", problem}, {"instance_out", a.instance_out}};
  }
  DFLASH_ASSIGN_OR_RETURN(std::unique_ptr<cache::KernelCache> cache, OpenCache(a.cache_dir));
  if (gpu::DeviceCount() == 0) {
    if (a.resolve_only && !a.arch.empty()) return Resolve(*family, problem, bucket, *cache, a.arch);
    auto driver = gpu::Driver();
    return Unsupported(std::string("no GPU here") + (driver.ok() ? "" : " (" + driver.status().message() + ")") +
                       ": kernel_bench times kernels on a GPU; `--resolve-only --arch sm_XX` looks the winner up "
                       "without one");
  }
  return RunOnGpu(a, *family, problem, bucket, *cache);
}

}  // namespace dflash::bench
