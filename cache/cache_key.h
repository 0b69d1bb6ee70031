// The keys of the cache. A TuningKey names one tuning problem (a family on one arch with one toolchain for one
// bucketed problem signature); an ArtifactKey names one compiled variant (family variant × arch × toolchain).
// Each key holds EVERY input that changes the binary or the choice; its digest is a SHA-256 over all fields in a
// fixed order, and a lookup also compares every stored field, so a partial match is always a miss.
// Thread-safety: plain values.
#pragma once

#include <string>

namespace dflash::cache {

// Bumped whenever the meaning of a stored row changes; part of every key (see schema.h for the file layout).
inline constexpr int kSchemaVersion = 1;
// The tool version compiled in (CMake project version).
const char* ToolVersion();

struct TuningKey {
  std::string family;           // "conv1d"
  std::string source_hash;      // SHA-256 of the family's sources as compiled (all files + common options)
                                // and of its tuning space (parameter names and values)
  std::string compile_options;  // canonical, space-separated
  std::string arch;             // full compute capability: "sm_120" (sm_121 is another key)
  std::string nvrtc_version;    // "13.0"
  std::string signature;        // canonical JSON of the bucketed problem
  int schema_version = kSchemaVersion;
  std::string tool_version = ToolVersion();

  std::string Digest() const;       // 64 hex chars
  std::string ReadableName() const;  // "conv1d sm_120 {signature}"
  bool operator==(const TuningKey&) const = default;
};

struct ArtifactKey {
  std::string family;
  std::string config;           // readable description of what is compiled (name expressions, defines)
  std::string source_hash;      // SHA-256 of the variant's translation unit (sources + defines + names + options)
  std::string compile_options;
  std::string arch;
  std::string nvrtc_version;
  int schema_version = kSchemaVersion;
  std::string tool_version = ToolVersion();

  std::string Digest() const;
  std::string ReadableName() const;  // "conv1d {config} sm_120"
  bool operator==(const ArtifactKey&) const = default;
};

}  // namespace dflash::cache
