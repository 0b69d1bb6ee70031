#include "kernels/attention/attention_family.h"

#include <algorithm>

#include "kernels/attention/attention_config.h"
#include "kernels/attention/attention_problem.h"
#include "kernels/attention/attention_workload.h"
#include "kernels/common/spec_family.h"

namespace dflash {
extern const EmbeddedFile kAttentionSources[];
extern const std::size_t kAttentionSources_count;
}  // namespace dflash

namespace dflash::attention {
namespace {

class AttentionFamily final : public kernels::SpecFamily<ProblemSpec> {
 public:
  explicit AttentionFamily(Direction dir)
      : SpecFamily(dir == Direction::kForward ? "attention_fwd" : "attention_bwd",
                   dir == Direction::kForward
                       ? "fused attention forward (O, LSE), bf16, GQA, causal/doc/DFlash block masks with tile skipping"
                       : "fused attention backward (dQ, dK, dV), bf16, GQA reduced in-kernel, causal/doc/DFlash masks",
                   {kAttentionSources, kAttentionSources_count},
                   dir == Direction::kForward ? ForwardParams() : BackwardParams()),
        dir_(dir) {}

  // The tuned winners on the H200 (kernels/attention/NOTES.md): forward 128 x 64, 4 warps, 2 stages for every mask
  // kind on the portable tier, and the Hopper tier's 128 x 128 first (the warp-specialised kernel 3, the persistent
  // kernel 6, kernels 5 and 4, then kernels 2 and 1; skipped where the arch is not sm_90a); backward FA2's 2-D warp
  // layout at 64 x 128 (2 stages for DFlash full 512 with every kv head in flight and for causal in L2-sized head
  // groups; 1 stage, head groups for DFlash full 128) and 64 x 64 (1 stage) for the sliding layers, after the Hopper
  // tier's: the warp-specialised backward (DFlash full: kernel 2; sliding: kernel 3; causal: kernel 3 in head
  // groups) and the wgmma backward at 64 x 128 and 64 x 64 (2 stages).
  std::vector<tuner::Config> SeedConfigs(const tuner::Problem&) const override {
    if (dir_ == Direction::kForward)
      return {{{"block_m", 128}, {"block_n", 128}, {"warps", 4}, {"stages", 2}, {"kernel", 3}},
              {{"block_m", 128}, {"block_n", 128}, {"warps", 4}, {"stages", 2}, {"kernel", 6}},
              {{"block_m", 128}, {"block_n", 128}, {"warps", 4}, {"stages", 2}, {"kernel", 5}},
              {{"block_m", 128}, {"block_n", 128}, {"warps", 4}, {"stages", 2}, {"kernel", 4}},
              {{"block_m", 128}, {"block_n", 64}, {"warps", 4}, {"stages", 2}, {"kernel", 3}},
              {{"block_m", 128}, {"block_n", 128}, {"warps", 4}, {"stages", 3}, {"kernel", 2}},
              {{"block_m", 128}, {"block_n", 128}, {"warps", 4}, {"stages", 2}, {"kernel", 1}},
              {{"block_m", 128}, {"block_n", 64}, {"warps", 4}, {"stages", 2}, {"kernel", 0}}};
    auto bwd = [](int block_n, int stages, int head_groups) {
      return tuner::Config{{"block_m", 64}, {"block_n", block_n},      {"stages", stages}, {"dq_mode", 0},
                           {"warp_layout", 2}, {"head_groups", head_groups}, {"kernel", 0}};
    };
    auto hopper_bwd = [](int block_n, int stages) {
      return tuner::Config{{"block_m", 64}, {"block_n", block_n}, {"stages", stages}, {"dq_mode", 0},
                           {"warp_layout", 1}, {"head_groups", 0},  {"kernel", 1}};
    };
    auto tma_bwd = [](int kernel, int head_groups) {
      return tuner::Config{{"block_m", 64},      {"block_n", 128},           {"stages", 2}, {"dq_mode", 0},
                           {"warp_layout", 1}, {"head_groups", head_groups}, {"kernel", kernel}};
    };
    return {tma_bwd(2, 0),      tma_bwd(3, 0),     tma_bwd(3, 1),  hopper_bwd(128, 2), hopper_bwd(64, 2),
            bwd(128, 2, 0),     bwd(128, 2, 1),    bwd(128, 1, 1), bwd(64, 1, 0)};
  }

  tuner::CompileSpec MakeCompileSpec(const tuner::Config& config, const tuner::Problem& bucket) const override {
    tuner::CompileSpec cs;
    cs.main_file = IsHopperTier(config) ? "attention_kernels_sm90a.cu" : "attention_kernels.cu";
    Result<ProblemSpec> spec = ParseProblem(bucket, dir_);
    if (!spec.ok()) return cs;  // no expressions: the compile fails with a clear "nothing to instantiate"
    for (const KernelLaunch& l : Launches(config, *spec)) {
      if (std::find(cs.name_expressions.begin(), cs.name_expressions.end(), l.name_expression) ==
          cs.name_expressions.end())
        cs.name_expressions.push_back(l.name_expression);
    }
    if (dir_ == Direction::kBackward) cs.name_expressions.push_back(BackwardHelperForwardLaunch(*spec).name_expression);
    return cs;
  }

  std::string ArchInvalidReason(const tuner::Config& config, std::string_view arch) const override {
    return attention::ArchInvalidReason(config, arch);
  }

  BlockShape BlockShapeOf(const tuner::Config& config, const tuner::Problem& bucket) const override {
    BlockShape s;
    Result<ProblemSpec> spec = ParseProblem(bucket, dir_);
    if (!spec.ok()) return s;
    for (const KernelLaunch& l : Launches(config, *spec)) {
      s.threads = std::max(s.threads, l.threads);
      s.dynamic_shared_bytes = std::max<std::size_t>(s.dynamic_shared_bytes, l.shared_bytes);
    }
    return s;
  }
  // A launched kernel's own shape; the backward's helper forward (not launched by the variant: the workload runs it)
  // has the default forward config's.
  BlockShape KernelBlockShape(const tuner::Config& config, const tuner::Problem& bucket,
                              const std::string& name_expression) const override {
    Result<ProblemSpec> spec = ParseProblem(bucket, dir_);
    if (!spec.ok()) return BlockShapeOf(config, bucket);
    std::vector<KernelLaunch> launches = Launches(config, *spec);
    if (dir_ == Direction::kBackward) launches.push_back(BackwardHelperForwardLaunch(*spec));
    for (const KernelLaunch& l : launches)
      if (l.name_expression == name_expression) return BlockShape{l.threads, l.shared_bytes};
    return BlockShapeOf(config, bucket);
  }

 private:
  Result<ProblemSpec> ParseSpec(const tuner::Problem& problem) const override { return ParseProblem(problem, dir_); }
  tuner::Problem BucketJsonOf(const ProblemSpec& spec) const override { return ToJson(BucketOf(spec)); }
  std::string InvalidReasonFor(const tuner::Config& config, const ProblemSpec& bucket) const override {
    const std::string why = dir_ == Direction::kForward ? ForwardInvalidReason(config, bucket)
                                                        : BackwardInvalidReason(config, bucket);
    return why.empty() ? TunerSkipReason(config, dir_) : why;
  }
  Result<std::unique_ptr<tuner::Workload>> MakeWorkloadFor(const gpu::Context&, const ProblemSpec& spec,
                                                           std::uint64_t seed) const override {
    return MakeAttentionWorkload(spec, dir_, seed);
  }

  std::vector<KernelLaunch> Launches(const tuner::Config& config, const ProblemSpec& spec) const {
    return dir_ == Direction::kForward ? ForwardLaunches(config, spec) : BackwardLaunches(config, spec);
  }
  Direction dir_;
};

}  // namespace

const tuner::KernelFamily& ForwardFamily() {
  static const AttentionFamily family(Direction::kForward);
  return family;
}

const tuner::KernelFamily& BackwardFamily() {
  static const AttentionFamily family(Direction::kBackward);
  return family;
}

}  // namespace dflash::attention
