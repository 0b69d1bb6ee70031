// How a kernel family, a bucketed problem, a config and an arch become cache keys. The one place that decides
// what goes into a key: every input of code generation (sources, defines, name expressions, options, arch, NVRTC
// version) and of the choice (the bucketed problem signature and the family's tuning space).
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "cache/cache_key.h"
#include "tuner/kernel_family.h"

namespace dflash::tuner {

// The canonical problem signature: JSON with sorted keys, no spaces.
std::string CanonicalSignature(const Problem& bucket);
// The key of the tuning problem (family, bucket) on `arch` with this binary's toolchain.
cache::TuningKey MakeTuningKey(const KernelFamily& family, const Problem& bucket, const std::string& arch);
// The key of one compiled translation unit (configs that differ only in launch-time parameters share it).
cache::ArtifactKey MakeArtifactKey(const KernelFamily& family, const Config& config, const Problem& bucket,
                                   const std::string& arch);

}  // namespace dflash::tuner
