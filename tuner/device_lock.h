// The per-GPU benchmark lock: one benchmark at a time per physical GPU across every thread and process of the
// machine, so parallel warm-ups never time their kernels against each other (tuning-lessons.md #5).
// Owns: the lock's name, derived from the GPU's UUID (else its PCI bus id), never from the ordinal, so two
// processes that see one GPU under different ordinals (CUDA_VISIBLE_DEVICES) still share one lock. The lock file
// lives in cache::MachineLockDir() and dies with its holder (cache::NamedLock).
// Who calls it: the warm-up orchestration, around each Measure (or each family's benchmarks) on a device.
// Thread-safety: call from any thread; the returned lock is released by its destructor on any thread.
#pragma once

#include <chrono>
#include <string>

#include "cache/named_lock.h"
#include "base/status.h"
#include "tuner/gpu_runtime.h"

namespace dflash::tuner {

// "gpu-bench-gpu-1a2b3c4d-…" from the UUID, else "gpu-bench-pci-0000-3b-00.0" from the PCI bus id (lower case,
// characters outside [a-z0-9._-] replaced by '-'). InvalidArgument when the device has neither.
Result<std::string> DeviceLockName(const gpu::DeviceInfo& device);

// Blocks until this process holds the device's benchmark lock; Busy (naming the GPU) after `timeout`.
Result<cache::NamedLock> LockDeviceForBenchmark(const gpu::DeviceInfo& device,
                                                std::chrono::milliseconds timeout = std::chrono::hours(24));

}  // namespace dflash::tuner
