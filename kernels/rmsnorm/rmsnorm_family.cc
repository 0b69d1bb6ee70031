#include "kernels/rmsnorm/rmsnorm_family.h"

#include "kernels/common/spec_family.h"
#include "kernels/rmsnorm/rmsnorm_config.h"
#include "kernels/rmsnorm/rmsnorm_workload.h"

namespace dflash {
extern const EmbeddedFile kRmsNormSources[];
extern const std::size_t kRmsNormSources_count;
}  // namespace dflash

namespace dflash::rmsnorm {
namespace {

class RmsNormFamily final : public kernels::SpecFamily<ProblemSpec> {
 public:
  RmsNormFamily()
      : SpecFamily("rmsnorm",
                   "row-wise RMSNorm (standard / zero-centred weight, fused residual add, SiLU gate), bf16, fp32 math",
                   {kRmsNormSources, kRmsNormSources_count}, Params()) {}

  tuner::CompileSpec MakeCompileSpec(const tuner::Config& config, const tuner::Problem& bucket) const override {
    tuner::CompileSpec spec;
    spec.main_file = "rmsnorm.cu";
    Result<ProblemSpec> p = ParseProblem(bucket);
    if (!p.ok()) return spec;  // no expressions: the compile fails with a clear "nothing to instantiate"
    // An invalid config still yields its expression: the kernel's static_asserts then fail the compile.
    Geometry g;
    auto get = [&](const char* k) { return config.count(k) ? static_cast<int>(config.at(k)) : 0; };
    g.threads = get("threads");
    g.row_threads = get("row_threads");
    g.vec = get("vec");
    spec.name_expressions.push_back(KernelNameExpression(g, *p));
    return spec;
  }

  BlockShape BlockShapeOf(const tuner::Config& config, const tuner::Problem&) const override {
    BlockShape s;
    auto it = config.find("threads");
    s.threads = it == config.end() ? 0u : static_cast<unsigned>(it->second);
    s.dynamic_shared_bytes = 0;  // the cross-warp partial sums are static shared memory (in ptxas's report)
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
    return rmsnorm::InvalidReasonFor(config, bucket);
  }
  Result<std::unique_ptr<tuner::Workload>> MakeWorkloadFor(const gpu::Context& ctx, const ProblemSpec& spec,
                                                           std::uint64_t seed) const override {
    return MakeRmsNormWorkload(ctx, spec, seed);
  }
};

}  // namespace

const tuner::KernelFamily& Family() {
  static const RmsNormFamily family;
  return family;
}

}  // namespace dflash::rmsnorm
