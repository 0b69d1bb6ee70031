#include "cache/cache_key.h"

#include "base/sha256.h"

namespace dflash::cache {

const char* ToolVersion() { return DFLASH_TOOL_VERSION; }

std::string TuningKey::Digest() const {
  Sha256Builder b;
  b.Field("tuning-key").Field(family).Field(source_hash).Field(compile_options).Field(arch).Field(nvrtc_version)
      .Field(signature).Field(std::to_string(schema_version)).Field(tool_version);
  return b.HexDigest();
}

std::string TuningKey::ReadableName() const { return family + " " + arch + " " + signature; }

std::string ArtifactKey::Digest() const {
  Sha256Builder b;
  b.Field("artifact-key").Field(family).Field(config).Field(source_hash).Field(compile_options).Field(arch)
      .Field(nvrtc_version).Field(std::to_string(schema_version)).Field(tool_version);
  return b.HexDigest();
}

std::string ArtifactKey::ReadableName() const { return family + " " + config + " " + arch; }

}  // namespace dflash::cache
