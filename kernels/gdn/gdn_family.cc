#include "kernels/gdn/gdn_family.h"

#include <algorithm>

#include "kernels/common/spec_family.h"
#include "kernels/gdn/gdn_config.h"
#include "kernels/gdn/gdn_problem.h"
#include "kernels/gdn/gdn_workload.h"

namespace dflash {
extern const EmbeddedFile kGdnSources[];
extern const std::size_t kGdnSources_count;
}  // namespace dflash

namespace dflash::gdn {
namespace {

class GdnFamily final : public kernels::SpecFamily<ProblemSpec> {
 public:
  GdnFamily()
      : SpecFamily("gdn",
                   "gated delta net forward (Qwen3.5 layer): chunked WY/UT on mma.sync + recurrent step, bf16, varlen",
                   {kGdnSources, kGdnSources_count}, Params()) {}

  tuner::CompileSpec MakeCompileSpec(const tuner::Config& config, const tuner::Problem& bucket) const override {
    tuner::CompileSpec spec;
    spec.main_file = IsHopperTier(config) ? "gdn_kernels_sm90a.cu" : "gdn_kernels.cu";
    // An invalid config still yields expressions: the kernels' static_asserts then fail the compile.
    Geometry g;
    auto get = [&](const char* k, int d) { return config.count(k) ? static_cast<int>(config.at(k)) : d; };
    g.chunk = get("chunk", 0);
    g.state_bv = get("state_bv", 0);
    g.out_bv = get("out_bv", 0);
    g.warps = get("warps", 0);
    g.segment_chunks = get("segment_chunks", 0);
    g.fused = get("fused", 0);  // piece_chunks changes no code
    g.prep_heads = get("prep_heads", 0);
    spec.name_expressions = KernelNamesOf(g).All();
    return spec;
  }

  std::string ArchInvalidReason(const tuner::Config& config, std::string_view arch) const override {
    return gdn::ArchInvalidReason(config, arch);
  }

  BlockShape BlockShapeOf(const tuner::Config& config, const tuner::Problem& bucket) const override {
    BlockShape s;
    Result<Geometry> g = GeometryOf(config);
    if (!g.ok()) return s;
    s.threads = std::max(g->threads(), kCombineThreads);
    s.dynamic_shared_bytes = static_cast<std::size_t>(MaxSharedBytesOf(*g));
    return s;
  }
  // Each kernel's own launch shape, so that pruning checks every kernel's registers at its own block size, not at
  // the largest block of the variant (the 128-thread combine beside 8-warp kernels).
  BlockShape KernelBlockShape(const tuner::Config& config, const tuner::Problem& bucket,
                              const std::string& name_expression) const override {
    if (Result<Geometry> g = GeometryOf(config); g.ok()) {
      for (const KernelShape& k : KernelShapesOf(*g)) {
        if (k.expression == name_expression) return {k.threads, static_cast<std::size_t>(k.dynamic_shared)};
      }
    }
    return BlockShapeOf(config, bucket);
  }

  // The tuned winners first (kernels/gdn/NOTES.md, Tuning space and seeds): the folded wgmma pass (every shape's
  // winner on an H100; with its SMs kept from prep, pass_reserve 2, -5 % at (16,32) 1x8192), the older wgmma forms,
  // the folded portable passes (the sm_90 / sm_120 winners), then the unfolded portable winners and the split pass.
  // Without seeds a small budget samples past the winners (budget 8: 0.727 vs 0.676 ms; budget 12 without the folded
  // portable seeds: 0.615 vs 0.488 ms).
  std::vector<tuner::Config> SeedConfigs(const tuner::Problem&) const override {
    auto fused = [](int state_bv, int warps, int stages, int segment_chunks, int piece_chunks, int prep_heads = 0,
                    int pass_reserve = 0) {
      return ConfigOf({.chunk = 32, .state_bv = state_bv, .out_bv = kFusedOutBv, .warps = warps,
                       .segment_chunks = segment_chunks, .fused = stages, .piece_chunks = piece_chunks,
                       .prep_heads = prep_heads, .pass_reserve = pass_reserve});
    };
    // The Hopper tier's wgmma pass first (sm_90a only: elsewhere the tuner drops these seeds as arch-invalid), with
    // the folded prep in 8 warps (0.8-1.6 % faster than in 4 at three shapes on an H100), in 4, then prep per key
    // head (0.1-1 % faster at (16,48) and (16,32) 1x8192) and per value head.
    return {fused(64, 8, kFusedWgmma, 0, 0, /*prep_heads=*/2),
            fused(64, 8, kFusedWgmma, 0, 64, /*prep_heads=*/2),
            fused(64, 8, kFusedWgmma, 0, 64, /*prep_heads=*/2, /*pass_reserve=*/2),
            fused(64, 4, kFusedWgmma, 0, 0, /*prep_heads=*/2),
            fused(64, 4, kFusedWgmma, 0, 64, /*prep_heads=*/2),
            fused(64, 4, kFusedWgmma, 0, 64, /*prep_heads=*/2, /*pass_reserve=*/2),
            fused(64, 4, kFusedWgmma, 0, 64, /*prep_heads=*/1),
            fused(64, 4, kFusedWgmma, 0, 64),
            fused(64, 4, kFusedWgmma, 0, 0),
            fused(64, 4, kFusedWgmma, 32, 0),
            fused(64, 8, 2, 0, 64, /*prep_heads=*/2),
            fused(64, 8, 2, 0, 0, /*prep_heads=*/2),
            fused(32, 8, 2, 0, 64, /*prep_heads=*/2),
            fused(64, 8, 1, 0, 64),
            fused(64, 8, 2, 0, 64),
            fused(64, 8, 2, 0, 0),
            fused(32, 8, 2, 0, 0),
            fused(64, 4, 1, 0, 0),
            fused(32, 4, 1, 32, 0)};
  }

 private:
  Result<ProblemSpec> ParseSpec(const tuner::Problem& problem) const override { return ParseProblem(problem); }
  tuner::Problem BucketJsonOf(const ProblemSpec& spec) const override { return ToJson(BucketOf(spec)); }
  std::string InvalidReasonFor(const tuner::Config& config, const ProblemSpec& bucket) const override {
    const std::string why = GeometryInvalidReason(config);
    if (!why.empty()) return why;
    // A segment as long as the bucket's longest possible sequence is the sequential pass done twice.
    const std::int64_t chunks = (bucket.tokens + config.at("chunk") - 1) / config.at("chunk");
    if (config.at("segment_chunks") > 0 && config.at("segment_chunks") >= chunks) {
      return "segment_chunks " + std::to_string(config.at("segment_chunks")) + " >= the bucket's " +
             std::to_string(chunks) + " chunks (no split)";
    }
    if (config.at("piece_chunks") > 0 && config.at("piece_chunks") >= chunks) {
      return "piece_chunks " + std::to_string(config.at("piece_chunks")) + " >= the bucket's " +
             std::to_string(chunks) + " chunks (one piece)";
    }
    return DominatedReason(config);
  }
  Result<std::unique_ptr<tuner::Workload>> MakeWorkloadFor(const gpu::Context& ctx, const ProblemSpec& spec,
                                                           std::uint64_t seed) const override {
    return MakeGdnWorkload(ctx, spec, seed);
  }
};

}  // namespace

const tuner::KernelFamily& ChunkedForwardFamily() {
  static const GdnFamily family;
  return family;
}

}  // namespace dflash::gdn
