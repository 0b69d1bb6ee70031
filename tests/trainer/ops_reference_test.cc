// ReferenceOps against straightforward scalar loops in double, written from the rules of ops.h / spec §1 and §4
// (each kv row's visibility decided by an if-chain, the delta rule with an explicit K x V state per head), on fresh
// random inputs. DraftAttention's gradients are checked against the hand-derived softmax-attention backward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "trainer/ops/reference_ops.h"

namespace dflash::trainer {
namespace {

using Vec = std::vector<double>;

Vec ToVec(const torch::Tensor& t) {
  const auto c = t.detach().to(torch::kCPU, torch::kDouble).contiguous();
  return Vec(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

void ExpectNear(const torch::Tensor& got, const Vec& want, double tol, const char* what) {
  const auto g = ToVec(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_FALSE(std::isnan(g[i])) << what << " NaN at " << i;
    ASSERT_NEAR(g[i], want[i], tol) << what << " at flat index " << i;
  }
}

struct DraftCase {
  std::vector<int> anchors, valid, doc_start;  // doc_start empty = undefined
  std::int64_t context = 0, window = 0;
  int block = 4;
};

// The visibility rule of ops.h, one (query row, kv row) at a time.
bool Sees(const DraftCase& c, std::int64_t r, std::int64_t kv) {
  const auto j = r / c.block, off = r % c.block;
  if (!c.valid[j]) return false;
  if (kv < c.context) {
    if (kv >= c.anchors[j]) return false;
    if (c.window > 0 && kv < c.anchors[j] + off - (c.window - 1)) return false;
    if (!c.doc_start.empty() && kv < c.doc_start[j]) return false;
    return true;
  }
  const auto kb = (kv - c.context) / c.block, koff = (kv - c.context) % c.block;
  if (kb != j) return false;
  return c.window == 0 || koff <= off;
}

DraftMask MaskOf(const DraftCase& c) {
  DraftMask m;
  m.anchors = torch::tensor(c.anchors, torch::kInt);
  m.valid = torch::tensor(c.valid, torch::kInt).to(torch::kUInt8);
  if (!c.doc_start.empty()) m.doc_start = torch::tensor(c.doc_start, torch::kInt);
  m.context_len = c.context;
  m.block_size = c.block;
  m.window = c.window;
  return m;
}

// Forward and backward of masked GQA attention in double loops. q [Q, Hq, D], k/v [KV, Hkv, D], dout [Q, Hq, D].
struct AttnResult {
  Vec out, dq, dk, dv;
};
template <typename SeesFn>
AttnResult LoopAttention(const Vec& q, const Vec& k, const Vec& v, const Vec& dout, std::int64_t nq, std::int64_t nkv,
                         std::int64_t hq, std::int64_t hkv, std::int64_t d, double scale, SeesFn sees) {
  AttnResult res{Vec(nq * hq * d, 0.0), Vec(nq * hq * d, 0.0), Vec(nkv * hkv * d, 0.0), Vec(nkv * hkv * d, 0.0)};
  const auto group = hq / hkv;
  for (std::int64_t h = 0; h < hq; ++h) {
    const auto g = h / group;
    for (std::int64_t r = 0; r < nq; ++r) {
      Vec p(nkv, 0.0);
      double mx = -1e300;
      bool any = false;
      for (std::int64_t t = 0; t < nkv; ++t) {
        if (!sees(r, t)) continue;
        double s = 0;
        for (std::int64_t x = 0; x < d; ++x) s += q[(r * hq + h) * d + x] * k[(t * hkv + g) * d + x];
        p[t] = s * scale;
        mx = std::max(mx, p[t]);
        any = true;
      }
      if (!any) continue;  // output and gradients stay 0
      double sum = 0;
      for (std::int64_t t = 0; t < nkv; ++t) sum += sees(r, t) ? std::exp(p[t] - mx) : 0.0;
      for (std::int64_t t = 0; t < nkv; ++t) p[t] = sees(r, t) ? std::exp(p[t] - mx) / sum : 0.0;
      Vec dp(nkv, 0.0);
      double pdp = 0;
      for (std::int64_t t = 0; t < nkv; ++t) {
        for (std::int64_t x = 0; x < d; ++x) {
          res.out[(r * hq + h) * d + x] += p[t] * v[(t * hkv + g) * d + x];
          dp[t] += dout[(r * hq + h) * d + x] * v[(t * hkv + g) * d + x];
          res.dv[(t * hkv + g) * d + x] += p[t] * dout[(r * hq + h) * d + x];
        }
        pdp += p[t] * dp[t];
      }
      for (std::int64_t t = 0; t < nkv; ++t) {
        const double ds = p[t] * (dp[t] - pdp) * scale;
        for (std::int64_t x = 0; x < d; ++x) {
          res.dq[(r * hq + h) * d + x] += ds * k[(t * hkv + g) * d + x];
          res.dk[(t * hkv + g) * d + x] += ds * q[(r * hq + h) * d + x];
        }
      }
    }
  }
  return res;
}

void CheckDraftAttention(const DraftCase& c) {
  torch::manual_seed(c.window * 31 + c.context);
  const std::int64_t n = c.anchors.size(), nq = n * c.block, nkv = c.context + nq, hq = 4, hkv = 2, d = 8;
  const double scale = 1.0 / std::sqrt(double(d));
  auto q = torch::randn({nq, hq, d}, torch::kDouble).requires_grad_();
  auto k = torch::randn({nkv, hkv, d}, torch::kDouble).requires_grad_();
  auto v = torch::randn({nkv, hkv, d}, torch::kDouble).requires_grad_();
  const auto dout = torch::randn({nq, hq, d}, torch::kDouble);
  auto ops = MakeReferenceOps();
  const auto out = ops->DraftAttention(q, k, v, MaskOf(c), scale);
  out.backward(dout);
  const auto want = LoopAttention(ToVec(q), ToVec(k), ToVec(v), ToVec(dout), nq, nkv, hq, hkv, d, scale,
                                  [&](std::int64_t r, std::int64_t t) { return Sees(c, r, t); });
  // The reference computes in fp32.
  ExpectNear(out, want.out, 1e-5, "out");
  ExpectNear(q.grad(), want.dq, 1e-5, "dq");
  ExpectNear(k.grad(), want.dk, 1e-5, "dk");
  ExpectNear(v.grad(), want.dv, 1e-5, "dv");
}

TEST(ReferenceOps, DraftMaskDenseMatchesTheRules) {
  const DraftCase c{{3, 7, 12, 0}, {1, 1, 1, 0}, {0, 5, 5, 0}, 14, 4, 4};
  const auto dense = DraftMaskDense(MaskOf(c), 16);
  ASSERT_EQ(dense.sizes(), torch::IntArrayRef({16, 30}));
  for (std::int64_t r = 0; r < 16; ++r) {
    for (std::int64_t t = 0; t < 30; ++t) EXPECT_EQ(dense[r][t].item<bool>(), Sees(c, r, t)) << r << "," << t;
  }
  EXPECT_THROW(DraftMaskDense(MaskOf(c), 15), c10::Error);
}

TEST(ReferenceOps, DraftAttentionFullMaskWithInvalidBlocks) {
  CheckDraftAttention({{2, 5, 9, 0}, {1, 1, 1, 0}, {}, 11, 0, 4});
}

TEST(ReferenceOps, DraftAttentionSlidingWindow) {
  CheckDraftAttention({{1, 6, 10, 0, 0}, {1, 1, 1, 0, 0}, {}, 12, 3, 4});
}

TEST(ReferenceOps, DraftAttentionPackedRowsWithDocStart) {
  CheckDraftAttention({{3, 6, 11}, {1, 1, 1}, {0, 4, 8}, 13, 5, 4});
}

TEST(ReferenceOps, DraftAttentionAnchorZeroSeesOnlyItsBlock) {
  // Anchor 0 sees no context at all; with the sliding mask its first row sees only itself.
  CheckDraftAttention({{0, 4}, {1, 1}, {}, 6, 2, 4});
}

TEST(ReferenceOps, CausalAttentionIsCausalPerDocument) {
  torch::manual_seed(7);
  const std::int64_t t = 13, hq = 6, hkv = 2, d = 8;
  const auto cu = torch::tensor({0, 5, 6, 13}, torch::kInt);
  const std::vector<std::int64_t> doc = {0, 0, 0, 0, 0, 1, 2, 2, 2, 2, 2, 2, 2};
  const auto q = torch::randn({t, hq, d}), k = torch::randn({t, hkv, d}), v = torch::randn({t, hkv, d});
  const auto out = MakeReferenceOps()->CausalAttention(q, k, v, cu, 0.3);
  const auto want = LoopAttention(ToVec(q), ToVec(k), ToVec(v), Vec(t * hq * d, 0.0), t, t, hq, hkv, d, 0.3,
                                  [&](std::int64_t r, std::int64_t c) { return doc[r] == doc[c] && c <= r; });
  ExpectNear(out, want.out, 1e-5, "causal out");
  const auto one_doc = MakeReferenceOps()->CausalAttention(q, k, v, torch::Tensor(), 0.3);
  const auto want_one = LoopAttention(ToVec(q), ToVec(k), ToVec(v), Vec(t * hq * d, 0.0), t, t, hq, hkv, d, 0.3,
                                      [](std::int64_t r, std::int64_t c) { return c <= r; });
  ExpectNear(one_doc, want_one.out, 1e-5, "causal out, one document");
}

TEST(ReferenceOps, CausalConv1dSiluRestartsAtDocuments) {
  torch::manual_seed(11);
  const std::int64_t t = 11, ch = 5, w = 4;
  const std::vector<std::int64_t> starts = {0, 2, 7};  // documents [0,2) [2,7) [7,11)
  const auto cu = torch::tensor({0, 2, 7, 11}, torch::kInt);
  const auto x = torch::randn({t, ch}, torch::kDouble), weight = torch::randn({ch, w}, torch::kDouble);
  const auto got = MakeReferenceOps()->CausalConv1dSilu(x, weight, cu);
  const auto xv = ToVec(x), wv = ToVec(weight);
  Vec want(t * ch);
  for (std::int64_t i = 0; i < t; ++i) {
    std::int64_t start = 0;
    for (auto s : starts) start = i >= s ? s : start;
    for (std::int64_t c = 0; c < ch; ++c) {
      double acc = 0;
      for (std::int64_t j = 0; j < w; ++j) {
        const auto src = i - (w - 1) + j;
        if (src >= start) acc += wv[c * w + j] * xv[src * ch + c];
      }
      want[i * ch + c] = acc / (1.0 + std::exp(-acc));
    }
  }
  ExpectNear(got, want, 1e-5, "conv1d");
  EXPECT_EQ(got.scalar_type(), torch::kDouble);
}

TEST(ReferenceOps, GatedDeltaRuleMatchesTheRecurrence) {
  torch::manual_seed(13);
  const std::int64_t t = 9, h = 2, hv = 4, kd = 4, vd = 3;
  const auto cu = torch::tensor({0, 4, 9}, torch::kInt);
  const auto q = torch::randn({t, h, kd}, torch::kDouble), k = torch::randn({t, h, kd}, torch::kDouble);
  const auto v = torch::randn({t, hv, vd}, torch::kDouble);
  const auto a = torch::randn({t, hv}, torch::kDouble), b = torch::randn({t, hv}, torch::kDouble);
  const auto a_log = torch::randn({hv}), dt_bias = torch::randn({hv});
  const auto got = MakeReferenceOps()->GatedDeltaRule(q, k, v, a, b, a_log, dt_bias, cu);
  const auto qv = ToVec(q), kv = ToVec(k), vv = ToVec(v), av = ToVec(a), bv = ToVec(b);
  const auto alv = ToVec(a_log), dtv = ToVec(dt_bias);
  Vec want(t * hv * vd, 0.0);
  for (std::int64_t j = 0; j < hv; ++j) {
    const auto kh = j / (hv / h);
    std::vector<std::vector<double>> s(kd, std::vector<double>(vd, 0.0));
    for (std::int64_t i = 0; i < t; ++i) {
      if (i == 0 || i == 4) s.assign(kd, std::vector<double>(vd, 0.0));
      double qn = 0, kn = 0;
      for (std::int64_t x = 0; x < kd; ++x) {
        qn += qv[(i * h + kh) * kd + x] * qv[(i * h + kh) * kd + x];
        kn += kv[(i * h + kh) * kd + x] * kv[(i * h + kh) * kd + x];
      }
      Vec qq(kd), kk(kd);
      for (std::int64_t x = 0; x < kd; ++x) {
        qq[x] = qv[(i * h + kh) * kd + x] / std::sqrt(qn + 1e-6) / std::sqrt(double(kd));
        kk[x] = kv[(i * h + kh) * kd + x] / std::sqrt(kn + 1e-6);
      }
      const double sp = std::log1p(std::exp(av[i * hv + j] + dtv[j]));
      const double g = -std::exp(alv[j]) * sp, beta = 1.0 / (1.0 + std::exp(-bv[i * hv + j]));
      for (auto& row : s)
        for (auto& e : row) e *= std::exp(g);
      for (std::int64_t y = 0; y < vd; ++y) {
        double stk = 0;
        for (std::int64_t x = 0; x < kd; ++x) stk += s[x][y] * kk[x];
        const double u = beta * (vv[(i * hv + j) * vd + y] - stk);
        for (std::int64_t x = 0; x < kd; ++x) s[x][y] += kk[x] * u;
        double o = 0;
        for (std::int64_t x = 0; x < kd; ++x) o += s[x][y] * qq[x];
        want[(i * hv + j) * vd + y] = o;
      }
    }
  }
  ExpectNear(got, want, 1e-5, "gated delta rule");
}

TEST(ReferenceOps, BadCuSeqlensIsRejected) {
  const auto x = torch::randn({6, 3}), w = torch::randn({3, 4});
  EXPECT_THROW(MakeReferenceOps()->CausalConv1dSilu(x, w, torch::tensor({0, 2, 5}, torch::kInt)), c10::Error);
  EXPECT_THROW(MakeReferenceOps()->CausalConv1dSilu(x, w, torch::tensor({0, 4, 2, 6}, torch::kInt)), c10::Error);
}

}  // namespace
}  // namespace dflash::trainer
