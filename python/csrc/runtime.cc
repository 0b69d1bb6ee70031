#include "runtime.h"

#include <map>
#include <memory>

namespace dflash::python {
namespace {

struct DeviceOps {
  std::unique_ptr<trainer::CachedKernelOps> ops;
  std::mutex mu;
};

std::mutex& RuntimeMutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

// The cache and the per-device ops live until the process ends and are never destroyed: at interpreter exit the
// static destructors run in an order this library does not control, and the CUDA driver the ops' modules and
// primary contexts belong to (dlopen'ed once by tuner/gpu_runtime) may already be gone, so destroying them then
// crashed the process (seen on the H200 after every test had passed). The OS reclaims all of it; the cache's SQLite
// database is in WAL mode with every write committed, so an unclosed connection loses nothing.
cache::KernelCache& Cache() {
  static cache::KernelCache* cache = nullptr;
  const std::lock_guard<std::mutex> g(RuntimeMutex());
  if (!cache) {
    Result<std::unique_ptr<cache::KernelCache>> opened = cache::KernelCache::Open(cache::CacheOptions{});
    TORCH_CHECK(opened.ok(), "dflash_tune: cannot open the kernel cache: ", opened.status().ToString());
    cache = opened->release();
  }
  return *cache;
}

LockedOps::LockedOps(trainer::CachedKernelOps& ops, std::mutex& mu, bool tune_missing)
    : lock_(mu), ops_(ops) {
  ops_.SetTuneOnMiss(tune_missing ? std::optional<tuner::TuneOptions>(tuner::TuneOptions{}) : std::nullopt);
}

LockedOps::~LockedOps() { ops_.SetTuneOnMiss(std::nullopt); }

LockedOps OpsFor(const torch::Device& device, bool tune_missing) {
  TORCH_CHECK(device.is_cuda(), "dflash_tune: the operators run on CUDA tensors, got ", device);
  cache::KernelCache& cache = Cache();
  static auto* by_device = new std::map<int, DeviceOps>();  // never destroyed (see Cache)
  const int index = device.has_index() ? device.index() : 0;
  DeviceOps* slot = nullptr;
  {
    const std::lock_guard<std::mutex> g(RuntimeMutex());
    slot = &(*by_device)[index];
    if (!slot->ops) {
      Result<std::unique_ptr<trainer::CachedKernelOps>> created = trainer::CachedKernelOps::Create(cache, index);
      TORCH_CHECK(created.ok(), "dflash_tune: ", created.status().ToString());
      slot->ops = std::move(*created);
    }
  }
  return LockedOps(*slot->ops, slot->mu, tune_missing);
}

}  // namespace dflash::python
