#include "kernels/conv1d/conv1d_family.h"

#include "kernels/conv1d/conv1d_config.h"
#include "kernels/conv1d/conv1d_workload.h"

namespace dflash {
extern const EmbeddedFile kConv1dSources[];
extern const std::size_t kConv1dSources_count;
}  // namespace dflash

namespace dflash::conv1d {
namespace {

class Conv1dFamily final : public tuner::KernelFamily {
 public:
  std::string_view name() const override { return "conv1d"; }
  std::string_view summary() const override {
    return "causal depthwise conv1d (width 4) + SiLU, bf16, packed varlen (before each gated-delta-net layer)";
  }
  std::span<const EmbeddedFile> sources() const override { return {kConv1dSources, kConv1dSources_count}; }
  std::vector<tuner::TunableParam> params() const override { return Params(); }

  Result<tuner::Problem> Bucket(const tuner::Problem& problem) const override {
    DFLASH_ASSIGN_OR_RETURN(ProblemSpec spec, ParseProblem(problem));
    return ToJson(BucketOf(spec));
  }

  std::string InvalidReason(const tuner::Config& config, const tuner::Problem& bucket) const override {
    Result<ProblemSpec> spec = ParseProblem(bucket);
    if (!spec.ok()) return "not a conv1d bucket: " + spec.status().message();
    return InvalidReasonFor(config, *spec);
  }

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

  Result<std::unique_ptr<tuner::Workload>> MakeWorkload(const gpu::Context& ctx, const tuner::Problem& problem,
                                                        std::uint64_t seed) const override {
    DFLASH_ASSIGN_OR_RETURN(ProblemSpec spec, ParseProblem(problem));
    return MakeConv1dWorkload(ctx, spec, seed);
  }
};

}  // namespace

const tuner::KernelFamily& Family() {
  static const Conv1dFamily family;
  return family;
}

}  // namespace dflash::conv1d
