#include "kernels/conv1d/conv1d_family.h"

#include "kernels/common/spec_family.h"
#include "kernels/conv1d/conv1d_config.h"
#include "kernels/conv1d/conv1d_workload.h"

namespace dflash {
extern const EmbeddedFile kConv1dSources[];
extern const std::size_t kConv1dSources_count;
}  // namespace dflash

namespace dflash::conv1d {
namespace {

class Conv1dFamily final : public kernels::SpecFamily<ProblemSpec> {
 public:
  Conv1dFamily()
      : SpecFamily("conv1d",
                   "causal depthwise conv1d (width 4) + SiLU, bf16, packed varlen (before each gated-delta-net layer)",
                   {kConv1dSources, kConv1dSources_count}, Params()) {}

  tuner::CompileSpec MakeCompileSpec(const tuner::Config& config, const tuner::Problem& bucket) const override {
    tuner::CompileSpec spec;
    spec.main_file = "conv1d.cu";
    Result<ProblemSpec> p = ParseProblem(bucket);
    const Layout layout = p.ok() ? p->layout : Layout::kTokenMajor;
    // An invalid config still yields its expression: the kernel's static_asserts then fail the compile.
    Geometry g;
    g.layout = layout;
    auto get = [&](const char* k) { return config.count(k) ? static_cast<int>(config.at(k)) : 0; };
    g.block_c = get("block_c");
    g.vec = get("vec");
    g.tpt = get("tpt");
    g.threads = get("threads");
    spec.name_expressions.push_back(KernelNameExpression(g));
    return spec;
  }

  BlockShape BlockShapeOf(const tuner::Config& config, const tuner::Problem& bucket) const override {
    BlockShape s;
    auto it = config.find("threads");
    s.threads = it == config.end() ? 0u : static_cast<unsigned>(it->second);
    s.dynamic_shared_bytes = 0;
    return s;
  }

 private:
  Result<ProblemSpec> ParseSpec(const tuner::Problem& problem) const override { return ParseProblem(problem); }
  tuner::Problem BucketJsonOf(const ProblemSpec& spec) const override { return ToJson(BucketOf(spec)); }
  std::string InvalidReasonFor(const tuner::Config& config, const ProblemSpec& bucket) const override {
    return conv1d::InvalidReasonFor(config, bucket);
  }
  Result<std::unique_ptr<tuner::Workload>> MakeWorkloadFor(const gpu::Context& ctx, const ProblemSpec& spec,
                                                           std::uint64_t seed) const override {
    return MakeConv1dWorkload(ctx, spec, seed);
  }
};

}  // namespace

const tuner::KernelFamily& Family() {
  static const Conv1dFamily family;
  return family;
}

}  // namespace dflash::conv1d
