#include "tuner/tuning_key.h"

#include <nlohmann/json.hpp>

#include "base/sha256.h"

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
  // The family-level hash covers every embedded file and the tuning space (a parameter or value added or
  // removed changes which config the tuner would choose: a winner chosen over another space is a miss, not a
  // config that lacks a parameter the launch code now needs). It does not cover the families' validity rules
  // (InvalidReason): a rule tightened without a source or space change keeps old winners' keys. The per-variant
  // parts (defines, name expressions) are in each artifact's key.
  Sha256Builder h;
  h.Field("dflash-tuning-key-v2").Field(SourceHash(family.sources(), CompileSpec{}));
  for (const TunableParam& p : family.params()) {
    h.Field(p.name);
    std::string values;
    for (std::int64_t v : p.values) values += std::to_string(v) + ",";
    h.Field(values);
  }
  k.source_hash = h.HexDigest();
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
