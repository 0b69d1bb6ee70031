// Compile-and-prune of one candidate variant, through the cache: the artifact (cubin, kernel names, ptxas
// report, or the compile error) is built at most once per (variant, arch, toolchain) across all processes and
// reused afterwards; the resource report is then checked against the arch's limits.
// Who calls it: Tuner (on its compile thread pool). Thread-safety: re-entrant.
#pragma once

#include <string>

#include "cache/entry.h"
#include "cache/kernel_cache.h"
#include "tuner/kernel_family.h"
#include "tuner/nvrtc_compiler.h"

namespace dflash::tuner {

struct CompiledCandidate {
  Config config;
  cache::Artifact artifact;
  bool built_here = false;     // this call compiled it (else it was in the cache)
  cache::Outcome outcome = cache::Outcome::kOk;  // kOk, kPruned or kCompileFailed
  std::string reason;          // why pruned or failed
};

Result<CompiledCandidate> CompileCandidate(cache::KernelCache& cache, const KernelFamily& family,
                                           const Config& config, const Problem& bucket, const std::string& arch,
                                           bool allow_spills);

// The artifact's resource JSON <-> ptxas usage per lowered kernel name.
std::string ResourcesToJson(const std::map<std::string, ResourceUsage>& usage);
Result<std::map<std::string, ResourceUsage>> ResourcesFromJson(const std::string& json);

}  // namespace dflash::tuner
