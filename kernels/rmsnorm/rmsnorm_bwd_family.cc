#include "kernels/rmsnorm/rmsnorm_bwd_family.h"

#include "kernels/common/spec_family.h"
#include "kernels/rmsnorm/rmsnorm_bwd_workload.h"

namespace dflash {
extern const EmbeddedFile kRmsNormSources[];
extern const std::size_t kRmsNormSources_count;
}  // namespace dflash

namespace dflash::rmsnorm {
namespace {

class RmsNormBwdFamily final : public kernels::SpecFamily<BwdProblemSpec> {
 public:
  RmsNormBwdFamily()
      : SpecFamily("rmsnorm_bwd",
                   "backward of the plain RMSNorm (dx bf16, dw partial sums fp32; standard / zero-centred weight)",
                   {kRmsNormSources, kRmsNormSources_count}, BwdParams()) {}

  tuner::CompileSpec MakeCompileSpec(const tuner::Config& config, const tuner::Problem& bucket) const override {
    tuner::CompileSpec spec;
    spec.main_file = "rmsnorm.cu";
    Result<BwdProblemSpec> p = ParseBwdProblem(bucket);
    if (!p.ok()) return spec;  // no expressions: the compile fails with a clear "nothing to instantiate"
    // An invalid config still yields its expression: the kernel's static_asserts then fail the compile.
    BwdGeometry g;
    auto get = [&](const char* k) { return config.count(k) ? static_cast<int>(config.at(k)) : 0; };
    g.row.threads = get("threads");
    g.row.row_threads = get("row_threads");
    g.row.vec = get("vec");
    g.row_groups = get("row_groups");
    spec.name_expressions.push_back(BwdKernelNameExpression(g, *p));
    return spec;
  }

  BlockShape BlockShapeOf(const tuner::Config& config, const tuner::Problem&) const override {
    BlockShape s;
    auto it = config.find("threads");
    s.threads = it == config.end() ? 0u : static_cast<unsigned>(it->second);
    s.dynamic_shared_bytes = 0;  // the cross-warp partial sums are static shared memory
    return s;
  }

  std::vector<tuner::Config> SeedConfigs(const tuner::Problem& bucket) const override {
    Result<BwdProblemSpec> p = ParseBwdProblem(bucket);
    return p.ok() ? BwdSeedConfigsFor(*p) : std::vector<tuner::Config>{};
  }

 private:
  Result<BwdProblemSpec> ParseSpec(const tuner::Problem& problem) const override { return ParseBwdProblem(problem); }
  tuner::Problem BucketJsonOf(const BwdProblemSpec& spec) const override { return ToJson(BucketOf(spec)); }
  std::string InvalidReasonFor(const tuner::Config& config, const BwdProblemSpec& bucket) const override {
    return BwdInvalidReasonFor(config, bucket);
  }
  Result<std::unique_ptr<tuner::Workload>> MakeWorkloadFor(const gpu::Context& ctx, const BwdProblemSpec& spec,
                                                           std::uint64_t seed) const override {
    return MakeRmsNormBwdWorkload(ctx, spec, seed);
  }
};

}  // namespace

const tuner::KernelFamily& BackwardFamily() {
  static const RmsNormBwdFamily family;
  return family;
}

}  // namespace dflash::rmsnorm
