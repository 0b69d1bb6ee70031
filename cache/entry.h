// The rows of the cache as C++ values: Entry (the winning variant of one TuningKey), Artifact (one compiled
// variant), CandidateResult (one measured or failed candidate of a tuning key) and the checksums that seal them.
// A row's checksum is SHA-256 over all of its fields (key fields, config, kernel names, cubin digest, timings,
// provenance) in a fixed order; the cubin has its own SHA-256. Both are verified on every read.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/cache_key.h"

namespace dflash::cache {

struct Timing {
  double median_ms = 0.0;
  double spread = 0.0;   // (p90 - p10) / median of the timed repetitions
  int repetitions = 0;
};

struct Provenance {
  std::string host;
  std::string gpu_name;
  int sm_count = 0;
  std::string driver_version;
  std::string nvrtc_version;
  std::string tool_version = ToolVersion();
  std::int64_t created_at = 0;   // unix seconds
  double tuning_wall_s = 0.0;
};

struct Entry {
  TuningKey key;
  std::string config;        // canonical JSON of the winning variant's config
  std::string kernel_names;  // JSON object: name expression -> lowered (mangled) name in the cubin
  std::vector<std::uint8_t> cubin;
  std::string cubin_sha256;
  Timing timing;
  Provenance provenance;
  std::string checksum;      // RowChecksum(*this); filled by Seal()

  void Seal();  // computes cubin_sha256 and checksum from the other fields
};

enum class ArtifactStatus { kOk, kCompileFailed };
const char* ArtifactStatusName(ArtifactStatus s);

struct Artifact {
  ArtifactKey key;
  ArtifactStatus status = ArtifactStatus::kOk;
  std::vector<std::uint8_t> cubin;   // empty when compile failed
  std::string cubin_sha256;
  std::string kernel_names;          // JSON: name expression -> lowered name
  std::string resources;             // JSON: lowered name -> {registers, shared, spills...}
  std::string log;                   // compiler log (the error for kCompileFailed)
  double compile_ms = 0.0;
  std::int64_t created_at = 0;
  std::string checksum;

  void Seal();
};

// Outcomes of a candidate; only kOk is ranked.
enum class Outcome { kOk, kPruned, kCompileFailed, kLaunchFailed, kMismatch, kTimeout };
const char* OutcomeName(Outcome o);
bool OutcomeFromName(const std::string& name, Outcome* out);

struct CandidateResult {
  std::string key_digest;     // TuningKey::Digest() of the problem it was measured for
  std::string config;         // canonical JSON
  Outcome outcome = Outcome::kOk;
  Timing timing;              // meaningful for kOk
  std::string reason;         // why it failed or was pruned
  std::string gpu_name;
  std::int64_t created_at = 0;
};

std::string RowChecksum(const Entry& e);
std::string RowChecksum(const Artifact& a);

}  // namespace dflash::cache
