// Runtime: what the dflash_tune operators launch through, one per process and never destroyed (runtime.cc says
// why): the kernel cache (opened on first use from $DFLASH_CACHE_DIR, else cache::DefaultCacheDir's rules; the same
// directory dflash-tune and dflash-train use) and one trainer::CachedKernelOps per CUDA device over it. Launches
// go through the cache's key and single-flight protocol only: a missing key is a c10::Error carrying the provider's
// NotFound text (key and warmup command), unless the call asks to tune it (CachedKernelOps::SetTuneOnMiss).
// Who may call: the operator implementations (cuda_ops.cc, cache_ops.cc). Thread-safety: any thread; a device's
// ops run one call at a time (the returned handle holds that device's lock).
#pragma once

#include <torch/torch.h>

#include <mutex>

#include "cache/kernel_cache.h"
#include "trainer/ops/cached_kernel_ops.h"

namespace dflash::python {

// The process's cache; a cache that cannot be opened is a c10::Error with the cache's one-line reason.
cache::KernelCache& Cache();

// The cached-kernel ops of `device` (a CUDA device), locked for the caller's launches; with `tune_missing` a
// missing key is tuned in place (for this device's arch) instead of failing.
class LockedOps {
 public:
  LockedOps(trainer::CachedKernelOps& ops, std::mutex& mu, bool tune_missing);
  ~LockedOps();
  LockedOps(const LockedOps&) = delete;
  LockedOps& operator=(const LockedOps&) = delete;
  trainer::CachedKernelOps* operator->() { return &ops_; }

 private:
  std::unique_lock<std::mutex> lock_;
  trainer::CachedKernelOps& ops_;
};
LockedOps OpsFor(const torch::Device& device, bool tune_missing);

}  // namespace dflash::python
