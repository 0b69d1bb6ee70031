#include "tuner/kernel_provider.h"

#include "tuner/tuning_key.h"

namespace dflash::tuner {

std::string WarmupCommandFor(const KernelFamily& family, const Problem& problem, const std::string& arch,
                             const std::string& cache_dir) {
  return "dflash-tune warmup --arch " + arch + " --cache-dir '" + cache_dir + "' --problem '" +
         std::string(family.name()) + "=" + problem.dump() + "'";
}

Result<cache::Entry> FindTuned(cache::KernelCache& cache, const KernelFamily& family, const Problem& problem,
                               const std::string& arch) {
  DFLASH_ASSIGN_OR_RETURN(Problem bucket, family.Bucket(problem));
  const cache::TuningKey key = MakeTuningKey(family, bucket, arch);
  DFLASH_ASSIGN_OR_RETURN(std::optional<cache::Entry> entry, cache.Lookup(key));
  if (!entry) {
    return NotFound("no tuned kernel for " + key.ReadableName() + " (key " + key.Digest().substr(0, 12) +
                    "); fill it with: " + WarmupCommandFor(family, problem, arch, cache.dir().string()));
  }
  return *std::move(entry);
}

Result<ResolvedKernel> KernelProvider::Get(const KernelFamily& family, const Problem& problem) {
  DFLASH_ASSIGN_OR_RETURN(Problem bucket, family.Bucket(problem));
  // The arch is fixed for the provider's life: family + bucket name the key.
  const std::string slot = std::string(family.name()) + "\n" + CanonicalSignature(bucket);
  std::lock_guard<std::mutex> g(mu_);
  if (auto it = loaded_.find(slot); it != loaded_.end()) return it->second.first;
  DFLASH_ASSIGN_OR_RETURN(const cache::Entry entry, FindTuned(cache_, family, problem, arch_));
  DFLASH_ASSIGN_OR_RETURN(Config config, ConfigFromJson(entry.config));
  DFLASH_RETURN_IF_ERROR(ctx_.MakeCurrent());
  DFLASH_ASSIGN_OR_RETURN(auto kernel, LoadedKernel::Load(entry.cubin, entry.kernel_names, config,
                                                           std::string(family.name()) + "[" + ConfigLabel(config) + "]"));
  ResolvedKernel r{&kernel->variant(), entry.key.Digest(), entry.config, entry.timing.median_ms, entry.cubin_sha256};
  loaded_[slot] = {r, std::move(kernel)};
  return r;
}

}  // namespace dflash::tuner
