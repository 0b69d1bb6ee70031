#include "tuner/variant_build.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>

#include <nlohmann/json.hpp>

#include "tuner/arch_limits.h"
#include "tuner/tuning_key.h"

namespace dflash::tuner {
namespace {

// Diagnostics for the process-level tests: with DFLASH_COMPILE_TRACE=<file>, each artifact this process
// compiled and committed is appended as "<pid> <artifact digest>" (one O_APPEND write, so lines never mix).
void TraceCompile(const cache::ArtifactKey& key) {
  const char* path = std::getenv("DFLASH_COMPILE_TRACE");
  if (!path || !*path) return;
  const std::string line = std::to_string(::getpid()) + " " + key.Digest() + "\n";
  int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  (void)!::write(fd, line.data(), line.size());
  ::close(fd);
}

}  // namespace

std::string ResourcesToJson(const std::map<std::string, ResourceUsage>& usage) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, u] : usage) {
    j[name] = {{"registers", u.registers}, {"shared_bytes", u.shared_bytes}, {"stack_frame", u.stack_frame},
               {"spill_stores", u.spill_stores}, {"spill_loads", u.spill_loads}, {"constant_bytes", u.constant_bytes}};
  }
  return j.dump();
}

Result<std::map<std::string, ResourceUsage>> ResourcesFromJson(const std::string& json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (!j.is_object()) return Corruption("resource report is not a JSON object");
  std::map<std::string, ResourceUsage> out;
  for (auto& [name, u] : j.items()) {
    ResourceUsage r;
    r.registers = u.value("registers", 0);
    r.shared_bytes = u.value("shared_bytes", 0);
    r.stack_frame = u.value("stack_frame", 0);
    r.spill_stores = u.value("spill_stores", 0);
    r.spill_loads = u.value("spill_loads", 0);
    r.constant_bytes = u.value("constant_bytes", 0);
    out[name] = r;
  }
  return out;
}

Result<CompiledCandidate> CompileCandidate(cache::KernelCache& cache, const KernelFamily& family,
                                           const Config& config, const Problem& bucket, const std::string& arch,
                                           bool allow_spills) {
  CompiledCandidate out;
  out.config = config;
  const cache::ArtifactKey key = MakeArtifactKey(family, config, bucket, arch);
  const std::string label = std::string(family.name()) + "[" + ConfigLabel(config) + "] " + arch;
  auto built = cache.GetOrBuildArtifact(key, [&]() -> Result<cache::Artifact> {
    cache::Artifact a;
    a.key = key;
    a.created_at = static_cast<std::int64_t>(std::time(nullptr));
    Result<CompiledVariant> cv = CompileVariant(family.sources(), family.MakeCompileSpec(config, bucket), arch, label);
    if (!cv.ok()) {
      if (cv.status().code() != ErrorCode::kCompileError) return cv.status();  // infrastructure, not the variant
      a.status = cache::ArtifactStatus::kCompileFailed;
      a.log = cv.status().message();
      a.kernel_names = "{}";
      a.resources = "{}";
      return a;
    }
    nlohmann::json names(cv->lowered_names);
    a.cubin = std::move(cv->cubin);
    a.kernel_names = names.dump();
    a.resources = ResourcesToJson(cv->resources);
    a.log = cv->log;
    a.compile_ms = cv->compile_ms;
    return a;
  });
  if (!built.ok()) return built.status().WithContext("compiling " + label);
  out.artifact = std::move(built->artifact);
  out.built_here = built->built_here;
  if (out.built_here) TraceCompile(key);
  if (out.artifact.status == cache::ArtifactStatus::kCompileFailed) {
    out.outcome = cache::Outcome::kCompileFailed;
    out.reason = out.artifact.log.substr(0, 2000);
    return out;
  }
  const auto limits = LimitsFor(arch);
  if (!limits) return Unsupported("no limits known for " + arch);
  DFLASH_ASSIGN_OR_RETURN(auto usage, ResourcesFromJson(out.artifact.resources));
  // Each kernel against its own launch shape (the artifact maps name expressions to the lowered names of `usage`).
  std::map<std::string, std::string> expression_of;
  const nlohmann::json names = nlohmann::json::parse(out.artifact.kernel_names, nullptr, false);
  if (names.is_object())
    for (const auto& [expr, lowered] : names.items())
      if (lowered.is_string()) expression_of[lowered.get<std::string>()] = expr;
  for (const auto& [name, u] : usage) {
    auto expr = expression_of.find(name);
    const auto shape = expr == expression_of.end() ? family.BlockShapeOf(config, bucket)
                                                   : family.KernelBlockShape(config, bucket, expr->second);
    std::string why = PruneReason(*limits, u, shape.threads, shape.dynamic_shared_bytes, allow_spills);
    if (!why.empty()) {
      out.outcome = cache::Outcome::kPruned;
      out.reason = why;
      break;
    }
  }
  return out;
}

}  // namespace dflash::tuner
