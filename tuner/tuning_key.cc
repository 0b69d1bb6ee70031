#include "tuner/tuning_key.h"

#include <nlohmann/json.hpp>

#include "tuner/nvrtc_compiler.h"

namespace dflash::tuner {
namespace {

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) {
    if (!out.empty()) out += ' ';
    out += p;
  }
  return out;
}

}  // namespace

std::string CanonicalSignature(const Problem& bucket) { return bucket.dump(); }  // nlohmann objects are sorted

cache::TuningKey MakeTuningKey(const KernelFamily& family, const Problem& bucket, const std::string& arch) {
  cache::TuningKey k;
  k.family = std::string(family.name());
  // The family-level hash covers every embedded file; the per-variant parts (defines, name expressions) are
  // in each artifact's key.
  k.source_hash = SourceHash(family.sources(), CompileSpec{});
  k.compile_options = Join(CompileOptionsFor(arch, CompileSpec{}));
  k.arch = arch;
  k.nvrtc_version = NvrtcVersion();
  k.signature = CanonicalSignature(bucket);
  return k;
}

cache::ArtifactKey MakeArtifactKey(const KernelFamily& family, const Config& config, const Problem& bucket,
                                   const std::string& arch) {
  const CompileSpec spec = family.MakeCompileSpec(config, bucket);
  cache::ArtifactKey k;
  k.family = std::string(family.name());
  // What is compiled, readably: the name expressions and defines. Configs that differ only in launch-time
  // parameters compile to the same translation unit and share one artifact.
  nlohmann::json what = {{"kernels", spec.name_expressions}, {"defines", spec.defines}};
  k.config = what.dump();
  k.source_hash = SourceHash(family.sources(), spec);
  k.compile_options = Join(CompileOptionsFor(arch, spec));
  k.arch = arch;
  k.nvrtc_version = NvrtcVersion();
  return k;
}

}  // namespace dflash::tuner
