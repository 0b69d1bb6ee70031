// The gdn family on a GPU: every runnable variant (one per distinct compile spec, with and without the split
// state pass, unfused and fused) against the float64 token-by-token reference on fresh random inputs with poisoned
// outputs: single and packed sequences, lengths that are not multiples of the chunk, initial states, HV/H ratios
// 1-5, and the API's other input forms (precomputed g / beta, q and k normalised by the caller).
// Needs a GPU (skips without one).
#include <gtest/gtest.h>

#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/gdn/gdn_api.h"
#include "kernels/gdn/gdn_config.h"
#include "kernels/gdn/gdn_family.h"
#include "kernels/gdn/gdn_layout.h"
#include "kernels/gdn/gdn_workload.h"
#include "tuner/arch_limits.h"
#include "tuner/gpu_runtime.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/thread_pool.h"

namespace dflash::gdn {
namespace {

struct Variant {
  gpu::Module module;
  tuner::LoadedVariant loaded;
};

// NVRTC compile (thread-safe; the test runs these in parallel), then Load on the test's thread.
Result<tuner::CompiledVariant> Compile(const tuner::Config& config, const std::string& arch) {
  const tuner::KernelFamily& f = ChunkedForwardFamily();
  const tuner::Problem bucket = *f.Bucket(MakeProblem(16, 48, 8192));
  // Any valid geometry: also the ones the tuner skips as dominated (the API runs them).
  if (const std::string why = GeometryInvalidReason(config); !why.empty()) return InvalidArgument(why);
  return tuner::CompileVariant(f.sources(), f.MakeCompileSpec(config, bucket), arch,
                               "gdn[" + tuner::ConfigLabel(config) + "]");
}

Result<std::unique_ptr<Variant>> Load(const tuner::Config& config, const std::string& arch,
                                      const tuner::CompiledVariant& compiled) {
  const tuner::KernelFamily& f = ChunkedForwardFamily();
  const tuner::Problem bucket = *f.Bucket(MakeProblem(16, 48, 8192));
  const std::string label = "gdn[" + tuner::ConfigLabel(config) + "]";
  const tuner::CompileSpec spec = f.MakeCompileSpec(config, bucket);
  auto limits = tuner::LimitsFor(arch);
  for (const std::string& e : spec.name_expressions) {  // each kernel at its own launch shape, as the tuner prunes
    const auto shape = f.KernelBlockShape(config, bucket, e);
    const std::string why = tuner::PruneReason(*limits, compiled.resources.at(compiled.lowered_names.at(e)),
                                               shape.threads, shape.dynamic_shared_bytes, false);
    if (!why.empty()) return Unsupported(label + " pruned: " + e + ": " + why);
  }
  auto v = std::make_unique<Variant>();
  DFLASH_ASSIGN_OR_RETURN(v->module, gpu::Module::Load(compiled.cubin, label));
  v->loaded.module = &v->module;
  v->loaded.config = config;
  v->loaded.label = label;
  for (const std::string& e : spec.name_expressions) {
    DFLASH_ASSIGN_OR_RETURN(CUfunction fn, v->module.Function(compiled.lowered_names.at(e)));
    v->loaded.functions[e] = fn;
  }
  return v;
}

class GdnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the gdn GPU tests need one";
  }
};

TEST_F(GdnGpu, VariantsMatchTheFloat64ReferenceOnPackedAndSingleSequences) {
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  Result<gpu::Stream> stream = gpu::Stream::Create();
  ASSERT_TRUE(stream.ok());
  std::vector<tuner::Config> configs;
  for (int chunk : {32, 64})
    for (int seg : {0, 8})  // 8-chunk segments: the 1000-token case splits into several
      for (int fused : {0, 1, 2})
        for (int warps : {4, 8}) {  // 8 warps: C / 16 diagonal blocks of the inverse in one or two warps
          Geometry g;
          g.chunk = chunk;
          g.warps = warps;
          g.state_bv = chunk == 64 ? 32 : 16;
          g.out_bv = fused ? kFusedOutBv : chunk == 64 ? 64 : 32;
          g.segment_chunks = seg;
          g.fused = fused;
          configs.push_back(ConfigOf(g));
          if (chunk == 32 && seg == 0 && fused > 0) {  // the prep / fused-pass overlap in pieces of 64 chunks
            g.piece_chunks = 64;
            configs.push_back(ConfigOf(g));
          }
        }
  for (int fused : {1, 2})  // the folded prep (per key head) and the fused pass's FOLD form
    for (int pieces : {0, 64})
      for (int bv_warps : {0, 1}) {
        configs.push_back(ConfigOf({.chunk = 32, .state_bv = bv_warps ? 64 : 32, .out_bv = kFusedOutBv,
                                    .warps = bv_warps ? 8 : 4, .fused = fused, .piece_chunks = pieces,
                                    .prep_heads = 2}));
      }
  const std::string arch = ctx->info().arch();
  if (arch == "sm_90a") {  // the Hopper tier: the wgmma fused pass (one warpgroup, 64 state columns)
    for (int chunk : {32, 64})
      for (int seg : {0, 8})
        for (int pieces : {0, 64}) {
          if (pieces > 0 && (seg > 0 || chunk == 64)) continue;
          configs.push_back(ConfigOf({.chunk = chunk, .state_bv = ::gdn::kWgmmaBv, .out_bv = kFusedOutBv,
                                      .warps = 4, .segment_chunks = seg, .fused = kFusedWgmma,
                                      .piece_chunks = pieces}));
        }
    for (int prep_heads : {1, 2})  // prep per key head (2: T folded, the pass reads v), beside the pass it feeds
      for (int seg : {0, 8})
        for (int pieces : {0, 64}) {
          if (pieces > 0 && seg > 0) continue;
          if (prep_heads == 2 && seg > 0) continue;
          configs.push_back(ConfigOf({.chunk = 32, .state_bv = ::gdn::kWgmmaBv, .out_bv = kFusedOutBv, .warps = 4,
                                      .segment_chunks = seg, .fused = kFusedWgmma, .piece_chunks = pieces,
                                      .prep_heads = prep_heads}));
        }
    for (int reserve : {1, 2})  // the pass padded so that prep shares its SMs with one block or none
      configs.push_back(ConfigOf({.chunk = 32, .state_bv = ::gdn::kWgmmaBv, .out_bv = kFusedOutBv, .warps = 4,
                                  .fused = kFusedWgmma, .piece_chunks = 64, .prep_heads = 2, .pass_reserve = reserve}));
    for (int pieces : {0, 64})  // the folded prep in 8 warps beside the one-warpgroup pass
      configs.push_back(ConfigOf({.chunk = 32, .state_bv = ::gdn::kWgmmaBv, .out_bv = kFusedOutBv, .warps = 8,
                                  .fused = kFusedWgmma, .piece_chunks = pieces, .prep_heads = 2,
                                  .pass_reserve = pieces > 0 ? 2 : 0}));
  }
  tuner::ThreadPool pool(8);
  std::vector<std::future<Result<tuner::CompiledVariant>>> compiled;
  for (const tuner::Config& c : configs) compiled.push_back(pool.Submit([c, arch]() { return Compile(c, arch); }));
  std::vector<std::unique_ptr<Variant>> variants;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    Result<tuner::CompiledVariant> c = compiled[i].get();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    Result<std::unique_ptr<Variant>> v = Load(configs[i], arch, *c);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    variants.push_back(std::move(*v));
  }
  struct Case {
    int H, HV;
    std::int64_t tokens, seqs;
    bool h0;
    InputForm form = {};
  };
  std::uint64_t seed = 4242;
  for (const Case& c : {Case{2, 2, 1, 1, false}, Case{2, 4, 63, 1, true}, Case{2, 6, 65, 1, false},
                        Case{2, 6, 1000, 5, true}, Case{16, 48, 200, 2, true},
                        // several pieces of 64 chunks of 32 per sequence
                        Case{2, 4, 4500, 1, false}, Case{2, 6, 6000, 2, true},
                        // a whole chunk; the long single sequences of the target's prefill
                        Case{2, 2, 64, 1, true}, Case{1, 2, 8192, 1, true}, Case{1, 1, 32768, 1, false},
                        // HV / H 4 (every gate slot of the prep per key head) and 5 (a second group of gates)
                        Case{1, 4, 100, 1, false}, Case{2, 10, 300, 2, true},
                        // flash-linear-attention's forms: g, beta given; with and without in-kernel normalisation
                        Case{2, 4, 1000, 3, true, {true, true}}, Case{2, 6, 300, 2, true, {true, false}},
                        Case{2, 2, 65, 1, false, {false, false}},
                        // q, k, v as strided views of one projection (the tensor maps' strides), packed
                        Case{2, 6, 1000, 3, true, {false, true, true}}}) {
    SCOPED_TRACE("H=" + std::to_string(c.H) + " HV=" + std::to_string(c.HV) + " T=" + std::to_string(c.tokens) +
                 (c.form.precomputed_gates ? " g/beta given" : "") + (c.form.qk_l2norm ? "" : " q/k as given") +
                 (c.form.one_projection ? " q/k/v in one projection" : ""));
    ProblemSpec spec;
    spec.heads = c.H;
    spec.value_heads = c.HV;
    spec.tokens = c.tokens;
    spec.num_seqs = c.seqs;
    spec.initial_state = c.h0;
    Result<std::unique_ptr<tuner::Workload>> w = MakeGdnWorkload(*ctx, spec, ++seed, c.form);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
    EXPECT_EQ((*w)->Check(stream->get()).code(), ErrorCode::kMismatch) << "a poisoned output must fail";
    for (const auto& v : variants) {
      ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
      const Status launched = (*w)->Launch(v->loaded, stream->get());
      ASSERT_TRUE(launched.ok()) << v->loaded.label << ": " << launched.ToString();
      const Status checked = (*w)->Check(stream->get());
      EXPECT_TRUE(checked.ok()) << v->loaded.label << ": " << checked.ToString();
    }
  }
}

}  // namespace
}  // namespace dflash::gdn
