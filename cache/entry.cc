#include "cache/entry.h"

#include <cstdio>

#include "base/sha256.h"

namespace dflash::cache {
namespace {

// Doubles hashed by their exact round-trip text, so a value read back from SQLite (8-byte REAL) hashes equal.
std::string Exact(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

std::string RowChecksum(const Entry& e) {
  Sha256Builder b;
  const TuningKey& k = e.key;
  b.Field("entry").Field(k.Digest()).Field(k.family).Field(k.source_hash).Field(k.compile_options).Field(k.arch)
      .Field(k.nvrtc_version).Field(k.signature).Field(std::to_string(k.schema_version)).Field(k.tool_version);
  b.Field(e.config).Field(e.kernel_names).Field(e.cubin_sha256);
  b.Field(Exact(e.timing.median_ms)).Field(Exact(e.timing.spread)).Field(std::to_string(e.timing.repetitions));
  const Provenance& p = e.provenance;
  b.Field(p.host).Field(p.gpu_name).Field(std::to_string(p.sm_count)).Field(p.driver_version).Field(p.nvrtc_version)
      .Field(p.tool_version).Field(std::to_string(p.created_at)).Field(Exact(p.tuning_wall_s));
  return b.HexDigest();
}

std::string RowChecksum(const Artifact& a) {
  Sha256Builder b;
  const ArtifactKey& k = a.key;
  b.Field("artifact").Field(k.Digest()).Field(k.family).Field(k.config).Field(k.source_hash)
      .Field(k.compile_options).Field(k.arch).Field(k.nvrtc_version).Field(std::to_string(k.schema_version))
      .Field(k.tool_version);
  b.Field(ArtifactStatusName(a.status)).Field(a.cubin_sha256).Field(a.kernel_names).Field(a.resources).Field(a.log)
      .Field(Exact(a.compile_ms)).Field(std::to_string(a.created_at));
  return b.HexDigest();
}

void Entry::Seal() {
  cubin_sha256 = Sha256Hex(cubin);
  checksum = RowChecksum(*this);
}

void Artifact::Seal() {
  cubin_sha256 = Sha256Hex(cubin);
  checksum = RowChecksum(*this);
}

const char* ArtifactStatusName(ArtifactStatus s) {
  return s == ArtifactStatus::kOk ? "ok" : "compile_failed";
}

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kOk: return "ok";
    case Outcome::kPruned: return "pruned";
    case Outcome::kCompileFailed: return "compile_failed";
    case Outcome::kLaunchFailed: return "launch_failed";
    case Outcome::kMismatch: return "mismatch";
    case Outcome::kTimeout: return "timeout";
  }
  return "unknown";
}

bool OutcomeFromName(const std::string& name, Outcome* out) {
  for (Outcome o : {Outcome::kOk, Outcome::kPruned, Outcome::kCompileFailed, Outcome::kLaunchFailed,
                    Outcome::kMismatch, Outcome::kTimeout}) {
    if (name == OutcomeName(o)) {
      *out = o;
      return true;
    }
  }
  return false;
}

}  // namespace dflash::cache
