#include "kernels/swiglu/swiglu_family.h"

#include "kernels/common/spec_family.h"
#include "kernels/swiglu/swiglu_workload.h"

namespace dflash {
extern const EmbeddedFile kSwigluSources[];
extern const std::size_t kSwigluSources_count;
}  // namespace dflash

namespace dflash::swiglu {
namespace {

class SwigluFamily final : public kernels::SpecFamily<ProblemSpec> {
 public:
  SwigluFamily()
      : SpecFamily("swiglu", "silu(gate) * up of the target's MLP, bf16 (LibTorch's two roundings, one pass)",
                   {kSwigluSources, kSwigluSources_count}, Params()) {}

  tuner::CompileSpec MakeCompileSpec(const tuner::Config& config, const tuner::Problem& bucket) const override {
    tuner::CompileSpec spec;
    spec.main_file = "swiglu.cu";
    Result<ProblemSpec> p = ParseProblem(bucket);
    if (!p.ok()) return spec;  // no expressions: the compile fails with a clear "nothing to instantiate"
    auto get = [&](const char* k) { return config.count(k) ? static_cast<int>(config.at(k)) : 0; };
    const Geometry g{get("threads"), get("vec"), get("items")};
    spec.name_expressions.push_back(KernelNameExpression(g));
    return spec;
  }

  BlockShape BlockShapeOf(const tuner::Config& config, const tuner::Problem&) const override {
    BlockShape s;
    auto it = config.find("threads");
    s.threads = it == config.end() ? 0u : static_cast<unsigned>(it->second);
    s.dynamic_shared_bytes = 0;
    return s;
  }

  std::vector<tuner::Config> SeedConfigs(const tuner::Problem& bucket) const override {
    Result<ProblemSpec> p = ParseProblem(bucket);
    return p.ok() ? SeedConfigsFor(*p) : std::vector<tuner::Config>{};
  }

 private:
  Result<ProblemSpec> ParseSpec(const tuner::Problem& problem) const override { return ParseProblem(problem); }
  tuner::Problem BucketJsonOf(const ProblemSpec& spec) const override { return ToJson(BucketOf(spec)); }
  std::string InvalidReasonFor(const tuner::Config& config, const ProblemSpec& bucket) const override {
    return swiglu::InvalidReasonFor(config, bucket);
  }
  Result<std::unique_ptr<tuner::Workload>> MakeWorkloadFor(const gpu::Context& ctx, const ProblemSpec& spec,
                                                           std::uint64_t seed) const override {
    return MakeSwigluWorkload(ctx, spec, seed);
  }
};

}  // namespace

const tuner::KernelFamily& Family() {
  static const SwigluFamily family;
  return family;
}

}  // namespace dflash::swiglu
