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

cache::KernelCache& Cache() {
  static std::unique_ptr<cache::KernelCache> cache;
  const std::lock_guard<std::mutex> g(RuntimeMutex());
  if (!cache) {
    Result<std::unique_ptr<cache::KernelCache>> opened = cache::KernelCache::Open(cache::CacheOptions{});
    TORCH_CHECK(opened.ok(), "dflash_tune: cannot open the kernel cache: ", opened.status().ToString());
    cache = std::move(*opened);
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
  static std::map<int, DeviceOps> by_device;
  const int index = device.has_index() ? device.index() : 0;
  DeviceOps* slot = nullptr;
  {
    const std::lock_guard<std::mutex> g(RuntimeMutex());
    slot = &by_device[index];
    if (!slot->ops) {
      Result<std::unique_ptr<trainer::CachedKernelOps>> created = trainer::CachedKernelOps::Create(cache, index);
      TORCH_CHECK(created.ok(), "dflash_tune: ", created.status().ToString());
      slot->ops = std::move(*created);
    }
  }
  return LockedOps(*slot->ops, slot->mu, tune_missing);
}

}  // namespace dflash::python
