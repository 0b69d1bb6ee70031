// SpecFamily<Spec>: the part of a tuner::KernelFamily that every kernel family writes the same way. A family parses a
// problem (JSON) into its own typed Spec, and the tuner's entry points that take a problem or a bucket are "parse,
// then do the family's part": Bucket (parse, bucket), InvalidReason (parse, or say that the JSON is not a bucket of
// this family, then the family's rules) and MakeWorkload (parse, then the family's workload). SpecFamily writes that
// once; a family implements the four typed hooks below plus the rest of KernelFamily (MakeCompileSpec, BlockShapeOf,
// SeedConfigs), and passes its name, summary, embedded sources and tuning space to the constructor.
// It lives in kernels/common/ rather than tuner/: the tuner's interface deliberately knows nothing of specs (a
// Problem is opaque JSON to it); the spec convention is the kernel families' own.
// Who may use it: the kernel families (kernels/<family>/<family>_family.cc). Thread-safety: as KernelFamily, an
// immutable object whose methods are all const and re-entrant; the hooks must be too.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "tuner/embedded_file.h"
#include "tuner/kernel_family.h"

namespace dflash::kernels {

template <class Spec>
class SpecFamily : public tuner::KernelFamily {
 public:
  SpecFamily(std::string_view name, std::string_view summary, std::span<const EmbeddedFile> sources,
             std::vector<tuner::TunableParam> params)
      : name_(name), summary_(summary), sources_(sources), params_(std::move(params)) {}

  std::string_view name() const final { return name_; }
  std::string_view summary() const final { return summary_; }
  std::span<const EmbeddedFile> sources() const final { return sources_; }
  std::vector<tuner::TunableParam> params() const final { return params_; }

  Result<tuner::Problem> Bucket(const tuner::Problem& problem) const final {
    DFLASH_ASSIGN_OR_RETURN(Spec spec, ParseSpec(problem));
    return BucketJsonOf(spec);
  }
  std::string InvalidReason(const tuner::Config& config, const tuner::Problem& bucket) const final {
    Result<Spec> spec = ParseSpec(bucket);
    if (!spec.ok()) {
      const bool vowel = !name_.empty() && std::string_view("aeiou").find(name_[0]) != std::string_view::npos;
      return std::string(vowel ? "not an " : "not a ") + name_ + " bucket: " + spec.status().message();
    }
    return InvalidReasonFor(config, *spec);
  }
  Result<std::unique_ptr<tuner::Workload>> MakeWorkload(const gpu::Context& ctx, const tuner::Problem& problem,
                                                        std::uint64_t seed) const final {
    DFLASH_ASSIGN_OR_RETURN(Spec spec, ParseSpec(problem));
    return MakeWorkloadFor(ctx, spec, seed);
  }

 protected:
  // The problem (or bucket) as the family's Spec, or why it is not one.
  virtual Result<Spec> ParseSpec(const tuner::Problem& problem) const = 0;
  // The tuning bucket of a valid problem, as JSON.
  virtual tuner::Problem BucketJsonOf(const Spec& spec) const = 0;
  // KernelFamily::InvalidReason for a bucket that parsed.
  virtual std::string InvalidReasonFor(const tuner::Config& config, const Spec& bucket) const = 0;
  // KernelFamily::MakeWorkload for a problem that parsed.
  virtual Result<std::unique_ptr<tuner::Workload>> MakeWorkloadFor(const gpu::Context& ctx, const Spec& spec,
                                                                   std::uint64_t seed) const = 0;

 private:
  std::string name_;
  std::string summary_;
  std::span<const EmbeddedFile> sources_;
  std::vector<tuner::TunableParam> params_;
};

}  // namespace dflash::kernels
