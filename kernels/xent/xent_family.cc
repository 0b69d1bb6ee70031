#include "kernels/xent/xent_family.h"

#include "kernels/common/spec_family.h"
#include "kernels/xent/xent_config.h"
#include "kernels/xent/xent_workload.h"

namespace dflash {
extern const EmbeddedFile kXentSources[];
extern const std::size_t kXentSources_count;
}  // namespace dflash

namespace dflash::xent {
namespace {

class XentFamily final : public kernels::SpecFamily<ProblemSpec> {
 public:
  XentFamily()
      : SpecFamily("xent",
                   "row-wise cross-entropy over fp32 logits: lse, weighted loss, argmax and the bf16 logits gradient "
                   "in one pass (the drafter's loss through the lm_head)",
                   {kXentSources, kXentSources_count}, Params()) {}

  tuner::CompileSpec MakeCompileSpec(const tuner::Config& config, const tuner::Problem& bucket) const override {
    tuner::CompileSpec spec;
    spec.main_file = "xent.cu";
    Result<ProblemSpec> p = ParseProblem(bucket);
    const bool grad = p.ok() ? p->grad : true;
    // An invalid config still yields its expression: the kernel's static_asserts then fail the compile.
    Geometry g;
    auto get = [&](const char* k) { return config.count(k) ? static_cast<int>(config.at(k)) : 0; };
    g.threads = get("threads");
    g.vec = get("vec");
    g.unroll = get("unroll");
    g.split = get("split");
    spec.name_expressions.push_back(KernelNameExpression(g, grad));
    return spec;
  }

  BlockShape BlockShapeOf(const tuner::Config& config, const tuner::Problem& bucket) const override {
    BlockShape s;
    auto it = config.find("threads");
    s.threads = it == config.end() ? 0u : static_cast<unsigned>(it->second);
    s.dynamic_shared_bytes = 0;
    return s;
  }

  std::vector<tuner::Config> SeedConfigs(const tuner::Problem&) const override { return xent::SeedConfigs(); }

 private:
  Result<ProblemSpec> ParseSpec(const tuner::Problem& problem) const override { return ParseProblem(problem); }
  tuner::Problem BucketJsonOf(const ProblemSpec& spec) const override { return ToJson(BucketOf(spec)); }
  std::string InvalidReasonFor(const tuner::Config& config, const ProblemSpec& bucket) const override {
    return xent::InvalidReasonFor(config, bucket);
  }
  Result<std::unique_ptr<tuner::Workload>> MakeWorkloadFor(const gpu::Context& ctx, const ProblemSpec& spec,
                                                           std::uint64_t seed) const override {
    return MakeXentWorkload(ctx, spec, seed);
  }
};

}  // namespace

const tuner::KernelFamily& Family() {
  static const XentFamily family;
  return family;
}

}  // namespace dflash::xent
