// KernelProvider: what callers (the trainer, benchmarks) use to run a family's tuned winner. It resolves the
// cache entry for (family, bucketed problem, an arch: the context's, or another one its GPU runs, e.g. sm_90 for the
// portable tier alone on a Hopper GPU), verifies it (the cache checks every read),
// loads its cubin once per process and hands out the ready LoadedVariant. It never compiles or tunes: a missing
// key fails with NotFound naming the key and the exact `dflash-tune warmup` command that fills it.
// Cost: the first Get of a (family, bucket) builds its tuning key (a SHA-256 over the family's sources) and reads
// the cache; later ones are a map lookup after the family's Bucket (no hashing, no database). Callers on a hot path
// keep the returned variant instead of asking again (CachedKernelOps resolves each launch shape once).
// Thread-safety: Get may be called from any thread; returned variants live as long as the provider.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "cache/kernel_cache.h"
#include "tuner/gpu_runtime.h"
#include "tuner/kernel_family.h"
#include "tuner/loaded_kernel.h"

namespace dflash::tuner {

struct ResolvedKernel {
  const LoadedVariant* variant = nullptr;
  std::string key_digest;
  std::string config;
  double tuned_ms = 0.0;
  std::string cubin_sha256;
};

class KernelProvider {
 public:
  // Keys of `arch` (empty: the context's, ctx.info().arch()); the caller checks that the GPU runs it (RunsOn).
  KernelProvider(cache::KernelCache& cache, const gpu::Context& ctx, std::string arch = {})
      : cache_(cache), ctx_(ctx), arch_(arch.empty() ? ctx.info().arch() : std::move(arch)) {}
  Result<ResolvedKernel> Get(const KernelFamily& family, const Problem& problem);

 private:
  cache::KernelCache& cache_;
  const gpu::Context& ctx_;
  const std::string arch_;
  std::mutex mu_;
  // By "<family>\n<bucket signature>": the resolved kernel and what keeps its module loaded.
  std::map<std::string, std::pair<ResolvedKernel, std::unique_ptr<LoadedKernel>>> loaded_;
};

// The cache entry of (family, the problem's bucket, arch): the lookup Get runs, for callers without a GPU of that
// arch (the Python package's cache checks). NotFound naming the key and its WarmupCommandFor when absent.
Result<cache::Entry> FindTuned(cache::KernelCache& cache, const KernelFamily& family, const Problem& problem,
                               const std::string& arch);

// The command that tunes exactly this problem into `cache_dir` for `arch`.
std::string WarmupCommandFor(const KernelFamily& family, const Problem& problem, const std::string& arch,
                             const std::string& cache_dir);

}  // namespace dflash::tuner
