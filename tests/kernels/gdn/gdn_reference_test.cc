// The float64 references of the gdn forward: the token-by-token recurrence against hand-computed values and
// against the independent chunked (WY/UT) formulation on random small problems (CPU only).
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/gdn/reference.h"

namespace dflash::gdn {
namespace {

ReferenceProblem RandomProblem(int H, int HV, int K, int V, std::vector<std::int32_t> cu, bool h0,
                               std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  ReferenceProblem p;
  p.heads = H;
  p.value_heads = HV;
  p.key_dim = K;
  p.value_dim = V;
  p.cu_seqlens = cu;
  const std::int64_t T = cu.back(), N = static_cast<std::int64_t>(cu.size()) - 1;
  auto fill = [&](std::vector<double>& x, std::int64_t count, double scale) {
    x.resize(count);
    for (double& e : x) e = scale * n(rng);
  };
  fill(p.q, T * H * K, 1.0);
  fill(p.k, T * H * K, 1.0);
  fill(p.v, T * HV * V, 1.0);
  fill(p.a, T * HV, 1.0);
  fill(p.b, T * HV, 1.0);
  std::uniform_real_distribution<double> ua(0.5, 16.0), udt(std::log(1e-3), std::log(0.5));
  for (int j = 0; j < HV; ++j) {
    p.A_log.push_back(std::log(ua(rng)));
    p.dt_bias.push_back(std::log(std::expm1(std::exp(udt(rng)))));
  }
  if (h0) fill(p.h0, N * HV * K * V, 0.3);
  return p;
}

double MaxAbsDiff(const std::vector<double>& x, const std::vector<double>& y) {
  EXPECT_EQ(x.size(), y.size());
  double m = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

TEST(GdnReference, GatesFollowTheQwenLayer) {
  EXPECT_NEAR(GateBeta(0.0), 0.5, 1e-15);
  EXPECT_NEAR(GateG(0.0, std::log(2.0), 0.0), -2.0 * std::log(2.0), 1e-15);  // -exp(A_log) softplus(0)
  EXPECT_NEAR(GateG(30.0, 0.0, 1.0), -31.0, 1e-12);                          // softplus threshold
}

TEST(GdnReference, OneTokenFromZeroStateIsScaledBetaTimesV) {
  // S = k (x) beta v  =>  o = S^T (scale q) = beta (k.q) scale v, with q, k normalised.
  ReferenceProblem p = RandomProblem(1, 1, 4, 3, {0, 1}, false, 7);
  p.q = {1, 0, 0, 0};
  p.k = {3, 4, 0, 0};  // normalised: (0.6, 0.8, 0, 0)
  p.v = {1, -2, 0.5};
  p.b = {0.0};         // beta = 0.5
  Result<ReferenceResult> r = ReferenceRecurrent(p);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const double qn = 1.0 / std::sqrt(1.0 + 1e-6), kn = 1.0 / std::sqrt(25.0 + 1e-6);
  const double expect = 0.5 * (3 * kn) * qn * 0.5;  // beta * k.q * scale (scale = 4^-1/2)
  EXPECT_NEAR(r->o[0], expect * 1.0, 1e-12);
  EXPECT_NEAR(r->o[1], expect * -2.0, 1e-12);
  EXPECT_NEAR(r->o[2], expect * 0.5, 1e-12);
  EXPECT_NEAR(r->ht[0 * 3 + 0], 3 * kn * 0.5 * 1.0, 1e-12);
}

TEST(GdnReference, DecayAloneShrinksTheInitialState) {
  // beta = 0 (b -> -inf): no write; S <- exp(g) S; the final state is exp(sum g) h0.
  ReferenceProblem p = RandomProblem(1, 2, 4, 4, {0, 3}, true, 9);
  for (double& b : p.b) b = -800.0;
  Result<ReferenceResult> r = ReferenceRecurrent(p);
  ASSERT_TRUE(r.ok());
  for (int hv = 0; hv < 2; ++hv) {
    double gsum = 0.0;
    for (int t = 0; t < 3; ++t) gsum += GateG(p.a[t * 2 + hv], p.A_log[hv], p.dt_bias[hv]);
    for (int i = 0; i < 16; ++i) {
      EXPECT_NEAR(r->ht[hv * 16 + i], std::exp(gsum) * p.h0[hv * 16 + i], 1e-12);
    }
  }
}

struct ChunkCase {
  int H, HV, K, V, chunk;
  std::vector<std::int32_t> cu;
  bool h0;
};

// Readable in CTest's listing (gtest would print the struct's raw bytes).
void PrintTo(const ChunkCase& c, std::ostream* os) {
  *os << "H=" << c.H << " HV=" << c.HV << " K=" << c.K << " V=" << c.V << " chunk=" << c.chunk
      << " tokens=" << c.cu.back() << (c.h0 ? " h0" : "");
}

class GdnReferenceAgreement : public ::testing::TestWithParam<ChunkCase> {};

// The chunked reference in `form` against the recurrence on the case's random problem (seed).
void ExpectChunkedMatchesRecurrence(const ChunkCase& c, ChunkedForm form, std::uint64_t seed) {
  ReferenceProblem p = RandomProblem(c.H, c.HV, c.K, c.V, c.cu, c.h0, seed);
  Result<ReferenceResult> rec = ReferenceRecurrent(p);
  Result<ReferenceResult> chk = ReferenceChunked(p, c.chunk, form);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  ASSERT_TRUE(chk.ok()) << chk.status().ToString();
  double scale = 0.0;
  for (double x : rec->o) scale = std::max(scale, std::fabs(x));
  ASSERT_GT(scale, 1e-3) << "degenerate case";
  EXPECT_LT(MaxAbsDiff(rec->o, chk->o), 1e-10 * std::max(1.0, scale));
  EXPECT_LT(MaxAbsDiff(rec->ht, chk->ht), 1e-10);
}

TEST_P(GdnReferenceAgreement, ChunkedFormulationMatchesTheRecurrence) {
  const ChunkCase c = GetParam();
  ExpectChunkedMatchesRecurrence(c, ChunkedForm::kWyUt, 1000 + c.chunk + c.HV);
}

TEST_P(GdnReferenceAgreement, FoldedChunkedFormulationMatchesTheRecurrence) {
  const ChunkCase c = GetParam();
  ExpectChunkedMatchesRecurrence(c, ChunkedForm::kFolded, 2000 + c.chunk + c.HV);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GdnReferenceAgreement,
    ::testing::Values(ChunkCase{1, 1, 8, 8, 4, {0, 1}, false},              // one token
                      ChunkCase{1, 1, 8, 8, 4, {0, 3}, false},              // shorter than a chunk
                      ChunkCase{1, 2, 8, 6, 4, {0, 4}, true},               // exactly one chunk, ratio 2
                      ChunkCase{2, 6, 16, 8, 8, {0, 17}, true},             // chunk + 1 row, ratio 3
                      ChunkCase{1, 3, 8, 8, 16, {0, 63, 63, 127, 192}, true},  // packed, one empty
                      ChunkCase{2, 2, 32, 16, 16, {0, 100}, false}),
    [](const ::testing::TestParamInfo<ChunkCase>& info) {
      const ChunkCase& c = info.param;
      return "H" + std::to_string(c.H) + "_HV" + std::to_string(c.HV) + "_C" + std::to_string(c.chunk) + "_T" +
             std::to_string(c.cu.back()) + "_N" + std::to_string(c.cu.size() - 1) + (c.h0 ? "_h0" : "");
    });

TEST(GdnReference, GivenGatesAndCallerNormalisedRowsGiveTheRawFormsResult) {
  // flash-linear-attention's input forms: g, beta computed by the caller; q, k normalised by the caller.
  const ReferenceProblem raw = RandomProblem(2, 4, 8, 8, {0, 9, 20}, true, 11);
  Result<ReferenceResult> want = ReferenceRecurrent(raw);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  ReferenceProblem given = raw;
  for (std::size_t i = 0; i < raw.a.size(); ++i) {
    given.g.push_back(GateG(raw.a[i], raw.A_log[i % 4], raw.dt_bias[i % 4]));
    given.beta.push_back(GateBeta(raw.b[i]));
  }
  given.a.clear(), given.b.clear(), given.A_log.clear(), given.dt_bias.clear();
  for (std::vector<double>* x : {&given.q, &given.k}) {
    for (std::size_t r = 0; r < x->size(); r += 8) {
      double ss = 0.0;
      for (int i = 0; i < 8; ++i) ss += (*x)[r + i] * (*x)[r + i];
      for (int i = 0; i < 8; ++i) (*x)[r + i] /= std::sqrt(ss + 1e-6);
    }
  }
  given.qk_l2norm = false;
  Result<ReferenceResult> got = ReferenceRecurrent(given);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_LT(MaxAbsDiff(got->o, want->o), 1e-12);
  EXPECT_LT(MaxAbsDiff(got->ht, want->ht), 1e-12);
  Result<ReferenceResult> chunked = ReferenceChunked(given, 4);
  ASSERT_TRUE(chunked.ok()) << chunked.status().ToString();
  EXPECT_LT(MaxAbsDiff(chunked->o, want->o), 1e-10);
  // Normalising already-normalised rows again is not the identity (eps): the flag must be honoured.
  given.qk_l2norm = true;
  Result<ReferenceResult> twice = ReferenceRecurrent(given);
  ASSERT_TRUE(twice.ok());
  EXPECT_GT(MaxAbsDiff(twice->o, want->o), 1e-9);
  // Both gate forms at once is refused.
  ReferenceProblem both = given;
  both.a = raw.a;
  EXPECT_EQ(ReferenceRecurrent(both).status().code(), ErrorCode::kInvalidArgument);
}

TEST(GdnReference, BadShapesAreRejected) {
  ReferenceProblem p = RandomProblem(2, 4, 8, 8, {0, 5}, false, 3);
  p.value_heads = 3;
  EXPECT_EQ(ReferenceRecurrent(p).status().code(), ErrorCode::kInvalidArgument);
  p = RandomProblem(2, 4, 8, 8, {0, 5}, false, 3);
  p.q.pop_back();
  Result<ReferenceResult> r = ReferenceChunked(p, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("q has"), std::string::npos);
}

}  // namespace
}  // namespace dflash::gdn
