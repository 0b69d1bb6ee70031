// CachedKernelOps against ReferenceOps on a GPU (label gpu; skipped without a GPU or without LibTorch's CUDA
// backend). The kernels the test shapes need are tuned into a cache in the temp dir (TuneMissing, small budget;
// shared by the test processes); then every op runs on fresh random bf16 CUDA inputs through both backends: forward
// outputs, and for the drafter attention dq/dk/dv through autograd (also with packed rows' doc_start), within bf16
// tolerance; invalid blocks give exact zeros. A cache without the keys gives NotFound naming the warmup command.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "cache/kernel_cache.h"
#include "trainer/ops/cached_kernel_ops.h"
#include "trainer/ops/reference_ops.h"

namespace dflash::trainer {
namespace {

namespace fs = std::filesystem;

// ctest runs every test of this file in its own process: they share one tuned cache (interprocess-safe, keys
// carry the kernel source hashes) so that only the first process tunes (~40 s on an H200), the others hit.
fs::path SharedCacheDir() {
  return fs::temp_directory_path() / ("dflash-ops-cached-kernel-gpu-test-" + std::to_string(::getuid()));
}

fs::path MakeTempDir() {
  std::string tmpl = (fs::temp_directory_path() / "ops_cached_kernel_gpu_XXXXXX").string();
  const char* made = ::mkdtemp(tmpl.data());
  return made ? fs::path(made) : fs::path();
}

// The test problems (small; tiny-model head dims).
constexpr std::int64_t kContext = 200, kBlocks = 8, kBlock = 16, kWindow = 64, kHq = 4, kHkv = 2, kDraftDim = 128;
constexpr std::int64_t kTokens = 300, kTargetDim = 64, kChannels = 512, kGdnHeads = 1, kGdnValueHeads = 2;

// The norms' and the loss's sizes (the tiny target's hidden size and vocabulary).
constexpr std::int64_t kHidden = 256, kLossRows = 96, kVocab = 1024;
constexpr auto kBf16Weight = rmsnorm::WeightDtype::kBf16;
constexpr std::int64_t kTargetRotary = 16;
constexpr std::int64_t kIntermediate = 512;  // the tiny target's MLP width  // the tiny target's partial rotary (a quarter of its 64 dims)

torch::Tensor CuSeqlens() { return torch::tensor({0, 100, 170, 300}, torch::kInt); }

std::vector<setup::OpShape> TestShapes() {
  return {setup::OpShape::DraftAttention(kContext, kBlocks, kBlock, 0, kHq, kHkv, kDraftDim, false),
          setup::OpShape::DraftAttention(kContext, kBlocks, kBlock, kWindow, kHq, kHkv, kDraftDim, false),
          setup::OpShape::DraftAttention(kContext, kBlocks, kBlock, 0, kHq, kHkv, kDraftDim, true),
          setup::OpShape::DraftAttention(kContext, kBlocks, kBlock, kWindow, kHq, kHkv, kDraftDim, true),
          setup::OpShape::CausalAttention(kTokens, 1, kHq, kHkv, kTargetDim),
          setup::OpShape::CausalAttention(kTokens, 3, kHq, kHkv, kTargetDim),
          setup::OpShape::Conv1d(kTokens, kChannels, 3),
          setup::OpShape::GatedDeltaRule(kTokens, kGdnHeads, kGdnValueHeads, 3),
          setup::OpShape::RmsNorm(kTokens, kHidden, rmsnorm::Kind::kZeroCentred, false, false, kBf16Weight),
          setup::OpShape::RmsNorm(kTokens, kHidden, rmsnorm::Kind::kZeroCentred, true, false, kBf16Weight),
          setup::OpShape::RmsNorm(kTokens * kHq, kTargetDim, rmsnorm::Kind::kZeroCentred, false, false, kBf16Weight),
          setup::OpShape::RmsNorm(kTokens * kGdnValueHeads, 128, rmsnorm::Kind::kStandard, false, true, kBf16Weight),
          setup::OpShape::TrainedRmsNorm(kTokens, kHidden, rmsnorm::Kind::kStandard, rmsnorm::WeightDtype::kFp32),
          setup::OpShape::Rope(kTokens, kHq, kTargetDim, kTargetRotary),
          setup::OpShape::Rope(kContext + kBlocks * kBlock, kHkv, kDraftDim, kDraftDim),
          setup::OpShape::Swiglu(kTokens, kIntermediate),
          setup::OpShape::CrossEntropy(kLossRows, kVocab)};
}

// One tuned cache and one CachedKernelOps for the whole suite (tuning is the slow part).
struct Suite {
  std::string skip;  // non-empty: why every test skips
  fs::path dir;
  std::unique_ptr<cache::KernelCache> cache;
  std::unique_ptr<CachedKernelOps> ops;
  std::vector<KernelUse> uses;
  Status tuned = Status::Ok();
};
Suite* suite = nullptr;

class CachedKernelOpsGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    suite = new Suite();
    if (!torch::cuda::is_available()) {
      suite->skip = "no CUDA device visible to LibTorch (or LibTorch is the CPU build)";
      return;
    }
    suite->dir = MakeTempDir();
    cache::CacheOptions o;
    o.dir = SharedCacheDir();
    auto c = cache::KernelCache::Open(o);
    if (!c.ok()) {
      suite->tuned = c.status();
      return;
    }
    suite->cache = std::move(*c);
    auto ops = CachedKernelOps::Create(*suite->cache, 0);
    if (!ops.ok()) {
      if (ops.status().code() == ErrorCode::kUnsupported) suite->skip = ops.status().message();
      suite->tuned = ops.status();
      return;
    }
    suite->ops = std::move(*ops);
    tuner::TuneOptions t;
    t.budget.max_variants = 4;
    t.seed = 7;
    auto uses = suite->ops->TuneMissing(setup::KernelRequestsFor(TestShapes()), t);
    if (uses.ok()) suite->uses = *uses;
    suite->tuned = uses.status();
  }
  static void TearDownTestSuite() {
    if (suite) {
      suite->ops.reset();
      suite->cache.reset();
      std::error_code ec;
      if (!suite->dir.empty()) fs::remove_all(suite->dir, ec);
    }
    delete suite;
    suite = nullptr;
  }
  void SetUp() override {
    if (!suite->skip.empty()) GTEST_SKIP() << suite->skip;
    ASSERT_TRUE(suite->tuned.ok()) << "tuning the test keys failed: " << suite->tuned.ToString();
    torch::manual_seed(1234);
  }
  static torch::Tensor Randn(std::vector<std::int64_t> shape, double scale = 1.0) {
    return (torch::randn(shape, torch::TensorOptions().device(torch::kCUDA)) * scale).to(torch::kBFloat16);
  }
  CachedKernelOps& ops() { return *suite->ops; }
  std::unique_ptr<Ops> reference_ = MakeReferenceOps();
};

// max |got - want| <= rtol * max |want| + atol, no NaN; reports the error.
void ExpectClose(const torch::Tensor& got, const torch::Tensor& want, double rtol, double atol, const char* what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const auto g = got.to(torch::kCPU, torch::kDouble), w = want.to(torch::kCPU, torch::kDouble);
  ASSERT_FALSE(torch::isnan(g).any().item<bool>()) << what << " has NaN";
  const double err = (g - w).abs().max().item<double>(), scale = w.abs().max().item<double>();
  EXPECT_LE(err, rtol * scale + atol) << what << ": max error " << err << " (max |reference| " << scale << ")";
}

DraftMask TestMask(std::int64_t window, bool packed = false) {
  DraftMask m;
  // Valid blocks first with ascending anchors (one at 1: a single context row), then two invalid blocks.
  m.anchors = torch::tensor({1, 30, 77, 120, 150, 199, 0, 0}, torch::kInt).to(torch::kCUDA);
  m.valid = torch::tensor({1, 1, 1, 1, 1, 1, 0, 0}, torch::kInt).to(torch::kUInt8).to(torch::kCUDA);
  m.context_len = kContext;
  m.block_size = kBlock;
  m.window = window;
  // Packed rows: documents start at 0, 64, 130 and 192 (tile edges and not); block 1's start is past its anchor
  // (no context at all), the invalid blocks' are arbitrary.
  if (packed) m.doc_start = torch::tensor({0, 40, 64, 64, 130, 192, 5, 0}, torch::kInt).to(torch::kCUDA);
  return m;
}

void CheckDraftAttention(CachedKernelOps& ops, Ops& reference, std::int64_t window, bool packed = false) {
  const auto opts = torch::TensorOptions().device(torch::kCUDA);
  const auto q0 = (torch::randn({kBlocks * kBlock, kHq, kDraftDim}, opts)).to(torch::kBFloat16);
  const auto k0 = (torch::randn({kContext + kBlocks * kBlock, kHkv, kDraftDim}, opts)).to(torch::kBFloat16);
  const auto v0 = (torch::randn({kContext + kBlocks * kBlock, kHkv, kDraftDim}, opts)).to(torch::kBFloat16);
  const auto dout = torch::randn({kBlocks * kBlock, kHq, kDraftDim}, opts).to(torch::kBFloat16);
  const double scale = 1.0 / std::sqrt(double(kDraftDim));
  const DraftMask mask = TestMask(window, packed);
  auto run = [&](Ops& backend) {
    auto q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
    auto o = backend.DraftAttention(q, k, v, mask, scale);
    o.backward(dout);
    return std::vector<torch::Tensor>{o.detach(), q.grad(), k.grad(), v.grad()};
  };
  const auto got = run(ops), want = run(reference);
  ExpectClose(got[0], want[0], 2e-2, 1e-2, "O");
  ExpectClose(got[1], want[1], 3e-2, 1e-2, "dQ");
  ExpectClose(got[2], want[2], 3e-2, 1e-2, "dK");
  ExpectClose(got[3], want[3], 3e-2, 1e-2, "dV");
  // Invalid blocks (the last two): output and dq exactly 0.
  const auto invalid_rows = torch::indexing::Slice(6 * kBlock, 8 * kBlock);
  EXPECT_EQ(got[0].index({invalid_rows}).abs().max().item<float>(), 0.0f);
  EXPECT_EQ(got[1].index({invalid_rows}).abs().max().item<float>(), 0.0f);
}

TEST_F(CachedKernelOpsGpu, PrepareReportsTheProvenanceOfEveryKey) {
  auto uses = ops().Prepare(setup::KernelRequestsFor(TestShapes()));
  ASSERT_TRUE(uses.ok()) << uses.status().ToString();
  // draft full fwd+bwd, sliding fwd+bwd, both again for packed rows (doc_bound), causal, doc-causal, conv1d, gdn,
  // four norms, the trained norm's forward and backward, two ropes, the swiglu, the loss.
  EXPECT_EQ(uses->size(), 22u);
  for (const KernelUse& u : *uses) {
    EXPECT_EQ(u.key_digest.size(), 64u) << u.operation;
    EXPECT_EQ(u.cubin_sha256.size(), 64u) << u.operation;
    EXPECT_GT(u.tuned_ms, 0.0) << u.operation;
    EXPECT_FALSE(u.config.empty()) << u.operation;
  }
}

TEST_F(CachedKernelOpsGpu, DraftAttentionFullMaskMatchesTheReferenceForwardAndBackward) {
  CheckDraftAttention(ops(), *reference_, 0);
}

TEST_F(CachedKernelOpsGpu, DraftAttentionSlidingMaskMatchesTheReferenceForwardAndBackward) {
  CheckDraftAttention(ops(), *reference_, kWindow);
}

TEST_F(CachedKernelOpsGpu, DraftAttentionWithDocStartMatchesTheReferenceForwardAndBackward) {
  CheckDraftAttention(ops(), *reference_, 0, /*packed=*/true);
  CheckDraftAttention(ops(), *reference_, kWindow, /*packed=*/true);
}

TEST_F(CachedKernelOpsGpu, DraftAttentionRejectsADocStartOfTheWrongSize) {
  DraftMask mask = TestMask(0);
  mask.doc_start = torch::zeros({kBlocks - 1}, torch::TensorOptions().dtype(torch::kInt).device(torch::kCUDA));
  const auto q = Randn({kBlocks * kBlock, kHq, kDraftDim});
  const auto kv = Randn({kContext + kBlocks * kBlock, kHkv, kDraftDim});
  try {
    ops().DraftAttention(q, kv, kv, mask, 0.1);
    FAIL() << "a doc_start that is not [N] must be rejected";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("doc_start must be [N]"), std::string::npos) << e.what();
  }
}

TEST_F(CachedKernelOpsGpu, CausalAttentionMatchesTheReferenceForOneAndManyDocuments) {
  const auto q = Randn({kTokens, kHq, kTargetDim}), k = Randn({kTokens, kHkv, kTargetDim});
  const auto v = Randn({kTokens, kHkv, kTargetDim});
  const double scale = 1.0 / std::sqrt(double(kTargetDim));
  ExpectClose(ops().CausalAttention(q, k, v, torch::Tensor(), scale),
              reference_->CausalAttention(q, k, v, torch::Tensor(), scale), 2e-2, 1e-2, "causal");
  ExpectClose(ops().CausalAttention(q, k, v, CuSeqlens(), scale),
              reference_->CausalAttention(q, k, v, CuSeqlens(), scale), 2e-2, 1e-2, "doc-causal");
}

TEST_F(CachedKernelOpsGpu, CausalConv1dSiluMatchesTheReference) {
  const auto x = Randn({kTokens, kChannels}), w = Randn({kChannels, 4}, 0.5);
  ExpectClose(ops().CausalConv1dSilu(x, w, CuSeqlens()), reference_->CausalConv1dSilu(x, w, CuSeqlens()), 2e-2,
              1e-2, "conv1d");
}

TEST_F(CachedKernelOpsGpu, GatedDeltaRuleMatchesTheReference) {
  const auto q = Randn({kTokens, kGdnHeads, 128}), k = Randn({kTokens, kGdnHeads, 128});
  const auto v = Randn({kTokens, kGdnValueHeads, 128});
  const auto a = Randn({kTokens, kGdnValueHeads}), b = Randn({kTokens, kGdnValueHeads});
  const auto fopts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  const auto a_log = torch::rand({kGdnValueHeads}, fopts) - 1.0, dt_bias = torch::randn({kGdnValueHeads}, fopts);
  ExpectClose(ops().GatedDeltaRule(q, k, v, a, b, a_log, dt_bias, CuSeqlens()),
              reference_->GatedDeltaRule(q, k, v, a, b, a_log, dt_bias, CuSeqlens()), 3e-2, 1e-2, "gdn");
}

// The target passes q, k, v as views into its conv1d output ([T, 2K + V], token stride 2K + V): read in place.
TEST_F(CachedKernelOpsGpu, GatedDeltaRuleReadsStridedViewsOfOneTensor) {
  const std::int64_t key_dim = kGdnHeads * 128, value_dim = kGdnValueHeads * 128;
  const auto mixed = Randn({kTokens, 2 * key_dim + value_dim});
  const auto q = mixed.narrow(1, 0, key_dim).view({kTokens, kGdnHeads, 128});
  const auto k = mixed.narrow(1, key_dim, key_dim).view({kTokens, kGdnHeads, 128});
  const auto v = mixed.narrow(1, 2 * key_dim, value_dim).view({kTokens, kGdnValueHeads, 128});
  ASSERT_FALSE(q.is_contiguous());
  const auto a = Randn({kTokens, kGdnValueHeads}), b = Randn({kTokens, kGdnValueHeads});
  const auto fopts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  const auto a_log = torch::rand({kGdnValueHeads}, fopts) - 1.0, dt_bias = torch::randn({kGdnValueHeads}, fopts);
  ExpectClose(ops().GatedDeltaRule(q, k, v, a, b, a_log, dt_bias, CuSeqlens()),
              reference_->GatedDeltaRule(q.contiguous(), k.contiguous(), v.contiguous(), a, b, a_log, dt_bias,
                                         CuSeqlens()),
              3e-2, 1e-2, "gdn (strided q, k, v)");
}

TEST_F(CachedKernelOpsGpu, NormsMatchTheReference) {
  const auto kind = nn::NormKind::kZeroCentred;
  const auto h = Randn({kTokens, kHidden}), delta = Randn({kTokens, kHidden});
  const auto w = Randn({kHidden}, 0.1);
  ExpectClose(ops().RmsNorm(h, w, 1e-6, kind), reference_->RmsNorm(h, w, 1e-6, kind), 1e-2, 1e-2, "rms norm");
  const auto [sum, normed] = ops().AddRmsNorm(h, delta, w, 1e-6, kind);
  const auto [ref_sum, ref_normed] = reference_->AddRmsNorm(h, delta, w, 1e-6, kind);
  EXPECT_TRUE(torch::equal(sum, ref_sum)) << "the residual sum is the bf16 sum";
  ExpectClose(normed, ref_normed, 1e-2, 1e-2, "residual add + rms norm");
  // A strided view, as the target's q: per head the first half of [query | gate].
  const auto qg = Randn({kTokens, kHq, 2 * kTargetDim});
  const auto q = qg.narrow(2, 0, kTargetDim);
  const auto wq = Randn({kTargetDim}, 0.1);
  ExpectClose(ops().RmsNorm(q, wq, 1e-6, kind), reference_->RmsNorm(q, wq, 1e-6, kind), 1e-2, 1e-2, "q norm");
  const auto o = Randn({kTokens, kGdnValueHeads, 128}), z = Randn({kTokens, kGdnValueHeads * 128});
  const auto wg = Randn({128}, 0.1) + 1.0;
  const auto gate = z.reshape({kTokens, kGdnValueHeads, 128});
  ExpectClose(ops().GatedRmsNorm(o, wg, gate, 1e-6), reference_->GatedRmsNorm(o, wg, gate, 1e-6), 1e-2, 1e-2,
              "gated rms norm");
}

TEST_F(CachedKernelOpsGpu, TrainedNormMatchesTheReferenceForwardAndBackward) {
  // The drafter's norm: bf16 x, the fp32 master weight, gradients of both through autograd.
  const auto x0 = Randn({kTokens, kHidden}, 3.0);
  const auto w0 = torch::rand({kHidden}, torch::TensorOptions().device(torch::kCUDA)) * 2.0 - 1.0;
  const auto dout = Randn({kTokens, kHidden});
  auto run = [&](Ops& backend) {
    auto x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
    auto y = backend.TrainedRmsNorm(x, w, 1e-6);
    y.backward(dout);
    return std::vector<torch::Tensor>{y.detach(), x.grad(), w.grad()};
  };
  const auto got = run(ops()), want = run(*reference_);
  EXPECT_EQ(got[0].scalar_type(), torch::kBFloat16);
  EXPECT_EQ(got[2].scalar_type(), torch::kFloat);
  ExpectClose(got[0], want[0], 1e-2, 1e-2, "trained norm");
  ExpectClose(got[1], want[1], 1e-2, 1e-3, "dx");
  ExpectClose(got[2], want[2], 1e-3, 1e-3, "dw");
  // A shape without a key is the NotFound error naming the warmup command, not a fallback.
  auto x = Randn({kTokens + 1000, kHidden}).requires_grad_();
  try {
    ops().TrainedRmsNorm(x, w0, 1e-6);
    ADD_FAILURE() << "a trained norm with no tuned key ran";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("dflash-tune warmup"), std::string::npos) << e.what();
  }
}

TEST_F(CachedKernelOpsGpu, RopeIsLibTorchsRotationBitForBitAndItsBackwardMatches) {
  // The target's: partial rotary on the strided q view (per head the first half of [query | gate]).
  const auto qg = Randn({kTokens, kHq, 2 * kTargetDim});
  const auto q = qg.narrow(2, 0, kTargetDim);
  const auto positions = torch::arange(kTokens, torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA));
  const auto target_rope = nn::MakeRope(positions * 37, kTargetRotary, 1e6);
  EXPECT_TRUE(torch::equal(ops().Rope(q, target_rope), reference_->Rope(q, target_rope)));
  // The drafter's: every dim rotated, differentiable.
  const std::int64_t rows = kContext + kBlocks * kBlock;
  const auto drafter_rope = nn::MakeRope(
      torch::arange(rows, torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA)) * 3, kDraftDim, 1e6);
  const auto k0 = Randn({rows, kHkv, kDraftDim}), dout = Randn({rows, kHkv, kDraftDim});
  auto run = [&](Ops& backend) {
    auto k = k0.clone().requires_grad_();
    auto y = backend.TrainedRope(k, drafter_rope);
    y.backward(dout);
    return std::vector<torch::Tensor>{y.detach(), k.grad()};
  };
  const auto got = run(ops()), want = run(*reference_);
  EXPECT_TRUE(torch::equal(got[0], want[0]));
  ExpectClose(got[1], want[1], 1e-2, 1e-3, "rope dx");
}

TEST_F(CachedKernelOpsGpu, SwiGluIsLibTorchsSiluTimesUpBitForBit) {
  const auto gate = Randn({kTokens, kIntermediate}, 3.0), up = Randn({kTokens, kIntermediate});
  EXPECT_TRUE(torch::equal(ops().SwiGlu(gate, up), reference_->SwiGlu(gate, up)));
}

TEST_F(CachedKernelOpsGpu, CrossEntropyMatchesTheReference) {
  const auto fopts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  const auto logits = torch::randn({kLossRows, kVocab}, fopts) * 3.0;
  auto labels = torch::randint(0, kVocab, {kLossRows}, fopts.dtype(torch::kLong));
  labels.narrow(0, 0, 5).fill_(-100);  // ignored rows
  auto weights = torch::rand({kLossRows}, fopts);
  weights.narrow(0, 10, 3).zero_();  // zero-weight rows
  const auto got = ops().CrossEntropy(logits, labels, weights, 1.0, true, torch::kBFloat16);
  const auto want = reference_->CrossEntropy(logits, labels, weights, 1.0, true, torch::kBFloat16);
  ExpectClose(got.loss, want.loss, 1e-5, 1e-6, "loss");
  EXPECT_TRUE(torch::equal(got.argmax.cpu(), want.argmax.cpu()));
  ExpectClose(got.grad, want.grad, 1e-2, 1e-5, "logits gradient");
}

TEST_F(CachedKernelOpsGpu, MissingKeyIsNotFoundNamingTheWarmupCommand) {
  cache::CacheOptions o;
  o.dir = suite->dir / "empty-cache";
  auto c = cache::KernelCache::Open(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto empty_ops = CachedKernelOps::Create(**c, 0);
  ASSERT_TRUE(empty_ops.ok()) << empty_ops.status().ToString();
  auto prepared = (*empty_ops)->Prepare(setup::KernelRequestsFor(TestShapes()));
  ASSERT_FALSE(prepared.ok());
  EXPECT_EQ(prepared.status().code(), ErrorCode::kNotFound);
  const std::string& msg = prepared.status().message();
  EXPECT_NE(msg.find("22 tuned kernel(s) missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dflash-tune warmup"), std::string::npos) << msg;
  const auto x = Randn({kTokens, kChannels}), w = Randn({kChannels, 4});
  try {
    (*empty_ops)->CausalConv1dSilu(x, w, CuSeqlens());
    FAIL() << "a missing key must fail";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("dflash-tune warmup"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dflash::trainer
