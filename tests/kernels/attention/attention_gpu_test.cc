// GPU tests of the attention families through the tuner interface: for every mask kind, forward and backward
// variants compiled with NVRTC for the device's arch, loaded, launched by the family's workload on fresh random
// inputs with poisoned outputs, and checked against the float64 CPU reference; the DFlash masks also as packed-rows
// problems (doc_bound: per-block document starts). Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "kernels/attention/attention_config.h"
#include "kernels/attention/attention_family.h"
#include "tuner/arch_limits.h"
#include "tuner/gpu_runtime.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/thread_pool.h"

namespace dflash::attention {
namespace {

struct Loaded {
  gpu::Module module;
  tuner::LoadedVariant variant;
};

tuner::Problem Problem(const char* mask, int heads_q, int heads_kv, int head_dim, int seq_q, int seq_kv) {
  tuner::Problem p = {{"mask", mask}, {"batch", 2}, {"heads_q", heads_q}, {"heads_kv", heads_kv},
                      {"head_dim", head_dim}, {"seq_q", seq_q}, {"seq_kv", seq_kv}};
  if (std::string(mask).rfind("dflash", 0) == 0) {
    p["ctx_len"] = seq_kv - seq_q;
    p["block_size"] = 16;
    if (std::string(mask) == "dflash_sliding") p["window"] = 100;
  }
  if (std::string(mask) == "doc_causal") p["num_docs"] = 5;
  return p;
}

class AttentionGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the attention GPU tests need one";
  }
};

struct Case {
  const tuner::KernelFamily* family;
  tuner::Problem problem;
  tuner::Config config;
};

// Compiles every case's variant in parallel (NVRTC is the slow part), then for each case: a workload on fresh
// inputs, a check of the poisoned outputs (must fail: the check can fail), then two launches each followed by a
// passing check.
void RunCases(const std::vector<Case>& cases, std::uint64_t seed) {
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  Result<gpu::Stream> stream = gpu::Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  const std::string arch = ctx->info().arch();
  std::vector<std::future<Result<tuner::CompiledVariant>>> compiled;
  {
    tuner::ThreadPool pool;
    for (const Case& c : cases) {
      const tuner::Problem bucket = *c.family->Bucket(c.problem);
      const std::string why = c.family->InvalidReason(c.config, bucket);  // a config the tuner skips still runs
      EXPECT_TRUE(why.empty() || IsTunerSkip(why)) << bucket.dump() << ": " << why;
      const tuner::CompileSpec spec = c.family->MakeCompileSpec(c.config, bucket);
      compiled.push_back(pool.Submit([&c, spec, arch]() {
        return tuner::CompileVariant(c.family->sources(), spec, arch, std::string(c.family->name()));
      }));
    }
  }
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(std::string(c.family->name()) + " " + c.problem.dump() + " " + tuner::ConfigLabel(c.config));
    Result<tuner::CompiledVariant> cv = compiled[i].get();
    ASSERT_TRUE(cv.ok()) << cv.status().ToString();
    const tuner::CompileSpec spec = c.family->MakeCompileSpec(c.config, *c.family->Bucket(c.problem));
    Loaded l;
    Result<gpu::Module> m = gpu::Module::Load(cv->cubin, "attention test");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    l.module = std::move(*m);
    l.variant.module = &l.module;
    l.variant.config = c.config;
    l.variant.label = std::string(c.family->name()) + "[" + tuner::ConfigLabel(c.config) + "]";
    for (const std::string& e : spec.name_expressions) {
      Result<CUfunction> f = l.module.Function(cv->lowered_names.at(e));
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      l.variant.functions[e] = *f;
    }
    Result<std::unique_ptr<tuner::Workload>> w = c.family->MakeWorkload(*ctx, c.problem, seed + i);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
    EXPECT_EQ((*w)->Check(stream->get()).code(), ErrorCode::kMismatch);
    for (int rep = 0; rep < 2; ++rep) {
      ASSERT_TRUE((*w)->PoisonOutputs(stream->get()).ok());
      const Status launched = (*w)->Launch(l.variant, stream->get());
      ASSERT_TRUE(launched.ok()) << launched.ToString();
      const Status checked = (*w)->Check(stream->get());
      EXPECT_TRUE(checked.ok()) << checked.ToString();
    }
    EXPECT_GT((*w)->Flops(), 0.0);
  }
}

const tuner::Config kFwd = {{"block_m", 64}, {"block_n", 64}, {"warps", 4}, {"stages", 2}};
const tuner::Config kFwd8 = {{"block_m", 128}, {"block_n", 64}, {"warps", 8}, {"stages", 1}};
const tuner::Config kBwdAtomic = {{"block_m", 64}, {"block_n", 64}, {"stages", 1}, {"dq_mode", 0}};
const tuner::Config kBwdSeparate = {{"block_m", 32}, {"block_n", 64}, {"stages", 2}, {"dq_mode", 1}};
const tuner::Config kBwd2d = {{"block_m", 64}, {"block_n", 128}, {"stages", 1}, {"dq_mode", 0}, {"warp_layout", 2}};

TEST_F(AttentionGpu, ForwardMatchesFloat64ForEveryMaskKind) {
  const tuner::KernelFamily* f = &ForwardFamily();
  std::vector<Case> cases;
  for (const char* mask : {"none", "causal", "doc_causal"}) {
    cases.push_back({f, Problem(mask, 8, 2, 128, 333, 333), kFwd});
    cases.push_back({f, Problem(mask, 6, 1, 64, 200, 200), kFwd8});
  }
  cases.push_back({f, Problem("causal", 12, 2, 128, 100, 357), kFwd});  // q < kv
  cases.push_back({f, Problem("causal", 4, 4, 128, 357, 100), kFwd});   // rows that see nothing
  for (const char* mask : {"dflash_full", "dflash_sliding"}) {
    cases.push_back({f, Problem(mask, 8, 2, 128, 21 * 16, 500 + 21 * 16), kFwd});
    cases.push_back({f, Problem(mask, 6, 1, 64, 13 * 16, 300 + 13 * 16), kFwd8});
  }
  cases.push_back({f, Problem("causal", 24, 4, 256, 517, 517), {{"block_m", 64}, {"block_n", 32}, {"warps", 4}, {"stages", 2}}});
  RunCases(cases, 100);
}

TEST_F(AttentionGpu, BackwardMatchesFloat64ForEveryMaskKindAndDqMode) {
  const tuner::KernelFamily* f = &BackwardFamily();
  std::vector<Case> cases;
  for (const tuner::Config& cfg : {kBwdAtomic, kBwdSeparate, kBwd2d}) {
    for (const char* mask : {"none", "causal", "doc_causal", "dflash_full", "dflash_sliding"}) {
      const bool dflash = std::string(mask).rfind("dflash", 0) == 0;
      cases.push_back({f, Problem(mask, 8, 2, 128, dflash ? 21 * 16 : 300, dflash ? 500 + 21 * 16 : 300), cfg});
      cases.push_back({f, Problem(mask, 6, 1, 64, dflash ? 9 * 16 : 150, dflash ? 200 + 9 * 16 : 150), cfg});
    }
  }
  RunCases(cases, 200);
}

TEST_F(AttentionGpu, PackedRowsDocStartMatchesFloat64ForwardAndBackward) {
  // doc_bound problems: the workload draws per-block document starts (reference.h RandomInputs).
  auto packed = [](const char* mask, int hq, int hkv, int d, int blocks, int ctx) {
    tuner::Problem p = Problem(mask, hq, hkv, d, blocks * 16, ctx + blocks * 16);
    p["doc_bound"] = true;
    return p;
  };
  std::vector<Case> cases;
  for (const char* mask : {"dflash_full", "dflash_sliding"}) {
    for (const tuner::Config& cfg : {kFwd, kFwd8}) {
      cases.push_back({&ForwardFamily(), packed(mask, 8, 2, 128, 21, 500), cfg});
      cases.push_back({&ForwardFamily(), packed(mask, 6, 1, 64, 13, 300), cfg});
    }
    for (const tuner::Config& cfg : {kBwdAtomic, kBwdSeparate, kBwd2d}) {
      cases.push_back({&BackwardFamily(), packed(mask, 8, 2, 128, 21, 500), cfg});
      cases.push_back({&BackwardFamily(), packed(mask, 6, 1, 64, 9, 200), cfg});
    }
  }
  RunCases(cases, 300);
}

// The Hopper tier (wgmma, sm_90a): the forward cases above, plus packed rows, head dim 256 and the 512-anchor shape.
TEST_F(AttentionGpu, HopperTierForwardMatchesFloat64ForEveryMaskKind) {
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  if (ctx->info().arch() != "sm_90a") GTEST_SKIP() << "the Hopper tier needs an sm_90a GPU (this one is " << ctx->info().arch() << ")";
  auto hopper = [](int bm, int bn, int stages) {  // stages 3: kernel 2 (softmax overlapping the next QK^T)
    return tuner::Config{{"block_m", bm}, {"block_n", bn}, {"warps", 4}, {"stages", stages}, {"kernel", stages == 3 ? 2 : 1}};
  };
  const tuner::KernelFamily* f = &ForwardFamily();
  std::vector<Case> cases;
  for (const char* mask : {"none", "causal", "doc_causal"}) {
    cases.push_back({f, Problem(mask, 8, 2, 128, 333, 333), hopper(128, 128, 2)});
    cases.push_back({f, Problem(mask, 6, 1, 64, 200, 200), hopper(64, 64, 1)});
    cases.push_back({f, Problem(mask, 8, 2, 128, 333, 333), hopper(128, 64, 3)});
    cases.push_back({f, Problem(mask, 6, 1, 64, 200, 200), hopper(64, 64, 3)});
  }
  cases.push_back({f, Problem("causal", 12, 2, 128, 100, 357), hopper(128, 64, 3)});
  cases.push_back({f, Problem("causal", 4, 4, 128, 357, 100), hopper(128, 64, 3)});
  cases.push_back({f, Problem("causal", 12, 2, 128, 100, 357), hopper(128, 64, 2)});  // q < kv
  cases.push_back({f, Problem("causal", 4, 4, 128, 357, 100), hopper(128, 128, 1)});  // rows that see nothing
  for (const char* mask : {"dflash_full", "dflash_sliding"}) {
    cases.push_back({f, Problem(mask, 8, 2, 128, 21 * 16, 500 + 21 * 16), hopper(128, 128, 2)});
    cases.push_back({f, Problem(mask, 6, 1, 64, 13 * 16, 300 + 13 * 16), hopper(64, 128, 2)});
    tuner::Problem packed = Problem(mask, 8, 2, 128, 21 * 16, 500 + 21 * 16);
    packed["doc_bound"] = true;
    cases.push_back({f, packed, hopper(128, 64, 2)});
    cases.push_back({f, Problem(mask, 8, 2, 128, 21 * 16, 500 + 21 * 16), hopper(128, 64, 3)});
    cases.push_back({f, packed, hopper(128, 64, 3)});
  }
  cases.push_back({f, Problem("causal", 24, 4, 256, 517, 517), hopper(64, 64, 3)});
  cases.push_back({f, Problem("causal", 24, 4, 256, 517, 517), hopper(128, 64, 2)});
  cases.push_back({f, Problem("doc_causal", 24, 4, 256, 517, 517), hopper(64, 64, 1)});
  tuner::Problem big = Problem("dflash_full", 32, 8, 128, 512 * 16, 8192 + 512 * 16);
  big["batch"] = 1;
  cases.push_back({f, big, hopper(128, 128, 2)});
  cases.push_back({f, big, hopper(128, 64, 3)});
  RunCases(cases, 400);
}

// The warp-specialised forward (kernels 3, 4 and 5: TMA copies by a producer warpgroup, two consumer warpgroups; 6: 5
// as a persistent kernel): every mask kind, GQA 4 / 6, head dims 64 / 128 / 256 (6: 64 / 128), sizes no tile
// multiple, q < kv, rows that see nothing, one kv tile, more kv tiles than buffers, packed rows, the 512-anchor shape
// (6: also many query tiles a block, batch 2).
TEST_F(AttentionGpu, WarpSpecialisedForwardMatchesFloat64ForEveryMaskKind) {
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  if (ctx->info().arch() != "sm_90a") GTEST_SKIP() << "the Hopper tier needs an sm_90a GPU (this one is " << ctx->info().arch() << ")";
  auto tma = [](int bn, int stages, int kernel) {
    return tuner::Config{{"block_m", 128}, {"block_n", bn}, {"warps", 4}, {"stages", stages}, {"kernel", kernel}};
  };
  const tuner::KernelFamily* f = &ForwardFamily();
  std::vector<Case> cases;
  for (int kernel : {3, 4, 5, 6}) {
    for (const char* mask : {"none", "causal", "doc_causal"}) {
      cases.push_back({f, Problem(mask, 8, 2, 128, 333, 333), tma(kernel == 6 && std::string(mask) == "doc_causal" ? 64 : 128, 2, kernel)});
      cases.push_back({f, Problem(mask, 6, 1, 64, 200, 200), tma(64, 3, kernel)});
    }
    cases.push_back({f, Problem("causal", 12, 2, 128, 100, 357), tma(64, 2, kernel)});   // q < kv
    cases.push_back({f, Problem("causal", 4, 4, 128, 357, 100), tma(128, 2, kernel)});   // rows that see nothing
    cases.push_back({f, Problem("none", 4, 4, 128, 40, 17), tma(64, 2, kernel)});        // one partial kv tile
    for (const char* mask : {"dflash_full", "dflash_sliding"}) {
      cases.push_back({f, Problem(mask, 8, 2, 128, 21 * 16, 500 + 21 * 16), tma(128, 2, kernel)});
      cases.push_back({f, Problem(mask, 6, 1, 64, 13 * 16, 300 + 13 * 16), tma(64, 2, kernel)});
      tuner::Problem packed = Problem(mask, 8, 2, 128, 21 * 16, 500 + 21 * 16);
      packed["doc_bound"] = true;
      cases.push_back({f, packed, tma(kernel == 6 ? 128 : 64, kernel == 6 ? 2 : 3, kernel)});
    }
    if (kernel == 6) {  // head dim <= 128; many query tiles a block (1024 tiles), batch 2, a partial last tile
      cases.push_back({f, Problem("causal", 32, 8, 128, 2000, 2000), tma(128, 2, kernel)});
    } else {
      cases.push_back({f, Problem("causal", 24, 4, 256, 517, 517), tma(64, 2, kernel)});
      cases.push_back({f, Problem("doc_causal", 24, 4, 256, 517, 517), tma(64, 2, kernel)});
    }
    tuner::Problem big = Problem("dflash_full", 32, 8, 128, 512 * 16, 8192 + 512 * 16);
    big["batch"] = 1;
    cases.push_back({f, big, tma(128, 2, kernel)});
  }
  RunCases(cases, 400);
}

// The Hopper tier's backward (wgmma, sm_90a): every mask kind, GQA 4 / 6, both head dims and every tile shape the
// space holds, sizes that are no tile multiple, q < kv, rows that see nothing, packed rows, the 512-anchor shape.
TEST_F(AttentionGpu, HopperTierBackwardMatchesFloat64ForEveryMaskKind) {
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  if (ctx->info().arch() != "sm_90a") GTEST_SKIP() << "the Hopper tier needs an sm_90a GPU (this one is " << ctx->info().arch() << ")";
  auto hopper = [](int bm, int bn, int stages, int head_groups = 0) {
    return tuner::Config{{"block_m", bm},      {"block_n", bn},  {"stages", stages},          {"dq_mode", 0},
                         {"warp_layout", 1},   {"kernel", 1},    {"head_groups", head_groups}};
  };
  const tuner::KernelFamily* f = &BackwardFamily();
  std::vector<Case> cases;
  for (const char* mask : {"none", "causal", "doc_causal", "dflash_full", "dflash_sliding"}) {
    const bool dflash = std::string(mask).rfind("dflash", 0) == 0;
    cases.push_back({f, Problem(mask, 8, 2, 128, dflash ? 21 * 16 : 300, dflash ? 500 + 21 * 16 : 300), hopper(64, 128, 2)});
    cases.push_back({f, Problem(mask, 8, 2, 128, dflash ? 21 * 16 : 300, dflash ? 500 + 21 * 16 : 300), hopper(64, 64, 1, 1)});
    cases.push_back({f, Problem(mask, 6, 1, 64, dflash ? 9 * 16 : 150, dflash ? 200 + 9 * 16 : 150), hopper(128, 128, 2)});
    cases.push_back({f, Problem(mask, 6, 1, 64, dflash ? 9 * 16 : 150, dflash ? 200 + 9 * 16 : 150), hopper(64, 64, 2)});
  }
  cases.push_back({f, Problem("causal", 12, 2, 128, 100, 357), hopper(64, 128, 2)});  // q < kv
  cases.push_back({f, Problem("causal", 4, 4, 128, 357, 100), hopper(64, 64, 2)});    // rows that see nothing
  for (const char* mask : {"dflash_full", "dflash_sliding"}) {
    tuner::Problem packed = Problem(mask, 8, 2, 128, 21 * 16, 500 + 21 * 16);
    packed["doc_bound"] = true;
    cases.push_back({f, packed, hopper(64, 128, 2)});
    cases.push_back({f, packed, hopper(64, 64, 1)});
  }
  tuner::Problem big = Problem("dflash_full", 32, 8, 128, 512 * 16, 8192 + 512 * 16);
  big["batch"] = 1;
  cases.push_back({f, big, hopper(64, 128, 2)});
  RunCases(cases, 500);
}

// The warp-specialised backward (kernels 2 to 4: TMA producer warpgroup, 64 x 128 tiles, head dim 128; 3 adds dQ by
// bulk reduce-adds and reads its rows under the products, 4 is 3 with the next item waited for under dK; kernel 2
// also with three query-tile buffers): every mask kind, GQA 4 / 6, sizes that are no tile multiple, q < kv, rows
// that see nothing, a single row, head groups, packed rows, batch 2, the 512-anchor shape.
TEST_F(AttentionGpu, WarpSpecialisedBackwardMatchesFloat64ForEveryMaskKind) {
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  if (ctx->info().arch() != "sm_90a")
    GTEST_SKIP() << "the Hopper tier needs an sm_90a GPU (this one is " << ctx->info().arch() << ")";
  const tuner::KernelFamily* f = &BackwardFamily();
  std::vector<Case> cases;
  for (const auto& [kernel, stages] : {std::pair{2, 2}, std::pair{3, 2}, std::pair{2, 3}, std::pair{4, 2}}) {
    auto tma = [kernel, stages](int head_groups = 0) {
      return tuner::Config{{"block_m", 64},    {"block_n", 128},   {"stages", stages},
                           {"dq_mode", 0},     {"warp_layout", 1}, {"kernel", kernel},
                           {"head_groups", head_groups}};
    };
    for (const char* mask : {"none", "causal", "doc_causal", "dflash_full", "dflash_sliding"}) {
      const bool dflash = std::string(mask).rfind("dflash", 0) == 0;
      cases.push_back({f, Problem(mask, 8, 2, 128, dflash ? 21 * 16 : 300, dflash ? 500 + 21 * 16 : 300), tma()});
      cases.push_back({f, Problem(mask, 12, 2, 128, dflash ? 9 * 16 : 150, dflash ? 200 + 9 * 16 : 150), tma(1)});
    }
    cases.push_back({f, Problem("causal", 12, 2, 128, 100, 357), tma()});  // q < kv
    cases.push_back({f, Problem("causal", 4, 4, 128, 357, 100), tma()});   // rows that see nothing
    cases.push_back({f, Problem("none", 4, 1, 128, 1, 1), tma()});         // one row, one kv
    for (const char* mask : {"dflash_full", "dflash_sliding"}) {
      tuner::Problem packed = Problem(mask, 8, 2, 128, 21 * 16, 500 + 21 * 16);
      packed["doc_bound"] = true;
      cases.push_back({f, packed, tma()});
    }
    tuner::Problem big = Problem("dflash_full", 32, 8, 128, 512 * 16, 8192 + 512 * 16);
    big["batch"] = 1;
    cases.push_back({f, big, tma()});
  }
  RunCases(cases, 500);
}

TEST_F(AttentionGpu, DrafterShapeWith512AnchorsPassesTheSampledCheck) {
  tuner::Problem p = Problem("dflash_full", 32, 8, 128, 512 * 16, 8192 + 512 * 16);
  p["batch"] = 1;
  RunCases({{&ForwardFamily(), p, kFwd}, {&BackwardFamily(), p, kBwdSeparate}}, 7);
}

}  // namespace
}  // namespace dflash::attention
