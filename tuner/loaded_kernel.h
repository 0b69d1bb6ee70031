// LoadedKernel: a cubin loaded into the current CUDA context together with the functions of its name
// expressions, i.e. a ready-to-launch tuner::LoadedVariant. Used for candidates during tuning and for cached
// winners at run time (tuner/kernel_provider.h).
// Thread-safety: immutable after Load; launch from any thread that has the context current.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "tuner/gpu_runtime.h"
#include "tuner/kernel_family.h"

namespace dflash::tuner {

class LoadedKernel {
 public:
  // kernel_names_json: {"name expression": "lowered name", ...} as stored with the cubin.
  static Result<std::unique_ptr<LoadedKernel>> Load(std::span<const std::uint8_t> cubin,
                                                    const std::string& kernel_names_json, const Config& config,
                                                    const std::string& label);
  const LoadedVariant& variant() const { return variant_; }

 private:
  LoadedKernel() = default;
  gpu::Module module_;
  LoadedVariant variant_;
};

}  // namespace dflash::tuner
