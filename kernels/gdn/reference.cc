#include "kernels/gdn/reference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <utility>

namespace dflash::gdn {
namespace {

constexpr double kL2Eps = 1e-6;

// Row `row` of a [rows, heads, dim] tensor, head `head`, L2-normalised (when `normalise`) and multiplied by `mult`.
std::vector<double> NormalisedRow(const std::vector<double>& x, std::int64_t row, int heads, int head, int dim,
                                  double mult, bool normalise) {
  std::vector<double> out(dim);
  const double* p = x.data() + (row * heads + head) * dim;
  double ss = 0.0;
  for (int i = 0; i < dim; ++i) ss += p[i] * p[i];
  const double s = normalise ? mult / std::sqrt(ss + kL2Eps) : mult;
  for (int i = 0; i < dim; ++i) out[i] = p[i] * s;
  return out;
}

double Dot(const std::vector<double>& x, const std::vector<double>& y) {
  double s = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

struct Dims {
  int H, HV, K, V, N;
  std::int64_t T;
  double scale;
};

Dims DimsOf(const ReferenceProblem& p) {
  Dims d;
  d.H = p.heads;
  d.HV = p.value_heads;
  d.K = p.key_dim;
  d.V = p.value_dim;
  d.N = static_cast<int>(p.cu_seqlens.size()) - 1;
  d.T = p.cu_seqlens.back();
  d.scale = p.scale != 0.0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(p.key_dim));
  return d;
}

// The initial state of (seq, hv) as a K x V row-major matrix.
std::vector<double> InitialState(const ReferenceProblem& p, const Dims& d, int n, int hv) {
  std::vector<double> s(static_cast<std::size_t>(d.K) * d.V, 0.0);
  if (!p.h0.empty()) {
    const double* src = p.h0.data() + (static_cast<std::int64_t>(n) * d.HV + hv) * d.K * d.V;
    s.assign(src, src + static_cast<std::size_t>(d.K) * d.V);
  }
  return s;
}

// The gate (g, beta) of token t, value head hv: as given, or from the raw inputs.
std::pair<double, double> GateAt(const ReferenceProblem& p, std::int64_t t, int hv) {
  const std::int64_t i = t * p.value_heads + hv;
  if (!p.g.empty()) return {p.g[i], p.beta[i]};
  return {GateG(p.a[i], p.A_log[hv], p.dt_bias[hv]), GateBeta(p.b[i])};
}

// Runs body(n, hv) for every (sequence, value head) pair on all cores; the pairs write disjoint outputs.
void ForEachSeqHead(int num_seqs, int value_heads, const std::function<void(int, int)>& body) {
  const int items = num_seqs * value_heads;
  const int workers = std::max(1, std::min<int>(items, static_cast<int>(std::thread::hardware_concurrency())));
  std::atomic<int> next{0};
  auto run = [&] {
    for (int i = next++; i < items; i = next++) body(i / value_heads, i % value_heads);
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < workers; ++w) pool.emplace_back(run);
  run();
  for (std::thread& t : pool) t.join();
}

}  // namespace

Status ValidateReferenceProblem(const ReferenceProblem& p) {
  if (p.heads <= 0 || p.value_heads <= 0 || p.key_dim <= 0 || p.value_dim <= 0) {
    return InvalidArgument("gdn reference: heads and dims must be positive");
  }
  if (p.value_heads % p.heads != 0) {
    return InvalidArgument("gdn reference: value heads " + std::to_string(p.value_heads) +
                           " is not a multiple of key heads " + std::to_string(p.heads));
  }
  if (p.cu_seqlens.size() < 2 || p.cu_seqlens[0] != 0) {
    return InvalidArgument("gdn reference: cu_seqlens must start at 0 and list at least one sequence");
  }
  for (std::size_t i = 1; i < p.cu_seqlens.size(); ++i) {
    if (p.cu_seqlens[i] < p.cu_seqlens[i - 1]) return InvalidArgument("gdn reference: cu_seqlens decreases");
  }
  const std::int64_t T = p.cu_seqlens.back();
  const std::int64_t N = static_cast<std::int64_t>(p.cu_seqlens.size()) - 1;
  auto want = [&](const std::vector<double>& x, std::int64_t n, const char* name) -> Status {
    if (static_cast<std::int64_t>(x.size()) != n) {
      return InvalidArgument(std::string("gdn reference: ") + name + " has " + std::to_string(x.size()) +
                             " elements, expected " + std::to_string(n));
    }
    return Status::Ok();
  };
  DFLASH_RETURN_IF_ERROR(want(p.q, T * p.heads * p.key_dim, "q"));
  DFLASH_RETURN_IF_ERROR(want(p.k, T * p.heads * p.key_dim, "k"));
  DFLASH_RETURN_IF_ERROR(want(p.v, T * p.value_heads * p.value_dim, "v"));
  if (!p.g.empty() || !p.beta.empty()) {
    if (!p.a.empty() || !p.b.empty() || !p.A_log.empty() || !p.dt_bias.empty()) {
      return InvalidArgument("gdn reference: give the gates raw (a, b, A_log, dt_bias) or as g, beta, not both");
    }
    DFLASH_RETURN_IF_ERROR(want(p.g, T * p.value_heads, "g"));
    DFLASH_RETURN_IF_ERROR(want(p.beta, T * p.value_heads, "beta"));
  } else {
    DFLASH_RETURN_IF_ERROR(want(p.a, T * p.value_heads, "a"));
    DFLASH_RETURN_IF_ERROR(want(p.b, T * p.value_heads, "b"));
    DFLASH_RETURN_IF_ERROR(want(p.A_log, p.value_heads, "A_log"));
    DFLASH_RETURN_IF_ERROR(want(p.dt_bias, p.value_heads, "dt_bias"));
  }
  if (!p.h0.empty()) {
    DFLASH_RETURN_IF_ERROR(want(p.h0, N * p.value_heads * p.key_dim * p.value_dim, "h0"));
  }
  return Status::Ok();
}

double GateG(double a, double a_log, double dt_bias) {
  const double x = a + dt_bias;
  const double sp = x > 20.0 ? x : std::log1p(std::exp(x));
  return -std::exp(a_log) * sp;
}

double GateBeta(double b) { return 1.0 / (1.0 + std::exp(-b)); }

Result<ReferenceResult> ReferenceRecurrent(const ReferenceProblem& p) {
  DFLASH_RETURN_IF_ERROR(ValidateReferenceProblem(p));
  const Dims d = DimsOf(p);
  const int r = d.HV / d.H;
  ReferenceResult out;
  out.o.assign(static_cast<std::size_t>(d.T) * d.HV * d.V, 0.0);
  out.ht.assign(static_cast<std::size_t>(d.N) * d.HV * d.K * d.V, 0.0);
  ForEachSeqHead(d.N, d.HV, [&](int n, int hv) {
    {
      const int hk = hv / r;
      std::vector<double> S = InitialState(p, d, n, hv);
      for (std::int64_t t = p.cu_seqlens[n]; t < p.cu_seqlens[n + 1]; ++t) {
        const std::vector<double> qn = NormalisedRow(p.q, t, d.H, hk, d.K, d.scale, p.qk_l2norm);
        const std::vector<double> kn = NormalisedRow(p.k, t, d.H, hk, d.K, 1.0, p.qk_l2norm);
        const auto [g, beta] = GateAt(p, t, hv);
        const double eg = std::exp(g);
        for (double& s : S) s *= eg;
        const double* vt = p.v.data() + (t * d.HV + hv) * d.V;
        for (int j = 0; j < d.V; ++j) {
          double kv = 0.0;
          for (int i = 0; i < d.K; ++i) kv += S[i * d.V + j] * kn[i];
          const double u = beta * (vt[j] - kv);
          double o = 0.0;
          for (int i = 0; i < d.K; ++i) {
            S[i * d.V + j] += kn[i] * u;
            o += S[i * d.V + j] * qn[i];
          }
          out.o[(t * d.HV + hv) * d.V + j] = o;
        }
      }
      std::copy(S.begin(), S.end(), out.ht.begin() + (static_cast<std::int64_t>(n) * d.HV + hv) * d.K * d.V);
    }
  });
  return out;
}

// The folded form of one chunk (gdn_chunk_prep_key<C, W, true> and the passes' FOLD forms): with Tb = T diag(beta)
// and X = v - diag(e^gamma) K h (so that V_new = Tb X),
//   O = diag(e^gamma) Q h + (P Tb) X,   h = e^gamma_last h + K2^T X,   K2 = (diag(e^(gamma_last - gamma)) Tb)^T K,
// P = tril_incl(Q K^T (.) Gamma). Updates o's c rows (zero on entry) and h in place.
static void FoldedChunk(const std::vector<std::vector<double>>& qn, const std::vector<std::vector<double>>& kn,
                        const std::vector<double>& gam, const std::vector<double>& beta, const std::vector<double>& T,
                        const double* v, std::int64_t v_row, int K, int V, double* o, std::int64_t o_row,
                        std::vector<double>& h) {
  const int c = static_cast<int>(gam.size());
  const double glast = gam[c - 1];
  std::vector<double> X(static_cast<std::size_t>(c) * V);
  for (int i = 0; i < c; ++i) {
    const double ei = std::exp(gam[i]);
    for (int j = 0; j < V; ++j) {
      double kh = 0.0;
      for (int x = 0; x < K; ++x) kh += kn[i][x] * h[x * V + j];
      X[i * V + j] = v[i * v_row + j] - ei * kh;
    }
  }
  for (int i = 0; i < c; ++i) {
    const double ei = std::exp(gam[i]);
    double* oi = o + i * o_row;
    for (int x = 0; x < K; ++x) {
      for (int j = 0; j < V; ++j) oi[j] += qn[i][x] * ei * h[x * V + j];
    }
    for (int s = 0; s < c; ++s) {  // (P Tb)[i][s] = sum over m in [s, i] of P[i][m] T[m][s] beta[s]
      double po = 0.0;
      for (int m = s; m <= i; ++m) po += Dot(qn[i], kn[m]) * std::exp(gam[i] - gam[m]) * T[m * c + s] * beta[s];
      for (int j = 0; j < V; ++j) oi[j] += po * X[s * V + j];
    }
  }
  for (double& x : h) x *= std::exp(glast);
  for (int s = 0; s < c; ++s) {
    std::vector<double> k2(K, 0.0);  // row s of K2: sum over i >= s of e^(glast - gam_i) T[i][s] beta[s] kn[i]
    for (int i = s; i < c; ++i) {
      const double f = std::exp(glast - gam[i]) * T[i * c + s] * beta[s];
      for (int x = 0; x < K; ++x) k2[x] += f * kn[i][x];
    }
    for (int x = 0; x < K; ++x) {
      for (int j = 0; j < V; ++j) h[x * V + j] += k2[x] * X[s * V + j];
    }
  }
}

Result<ReferenceResult> ReferenceChunked(const ReferenceProblem& p, int chunk_len, ChunkedForm form) {
  DFLASH_RETURN_IF_ERROR(ValidateReferenceProblem(p));
  if (chunk_len <= 0) return InvalidArgument("gdn reference: chunk length must be positive");
  const Dims d = DimsOf(p);
  const int r = d.HV / d.H;
  ReferenceResult out;
  out.o.assign(static_cast<std::size_t>(d.T) * d.HV * d.V, 0.0);
  out.ht.assign(static_cast<std::size_t>(d.N) * d.HV * d.K * d.V, 0.0);
  for (int n = 0; n < d.N; ++n) {
    for (int hv = 0; hv < d.HV; ++hv) {
      const int hk = hv / r;
      std::vector<double> h = InitialState(p, d, n, hv);  // K x V
      for (std::int64_t t0 = p.cu_seqlens[n]; t0 < p.cu_seqlens[n + 1]; t0 += chunk_len) {
        const int c = static_cast<int>(std::min<std::int64_t>(chunk_len, p.cu_seqlens[n + 1] - t0));
        std::vector<std::vector<double>> qn(c), kn(c);
        std::vector<double> gam(c), beta(c);
        double acc = 0.0;
        for (int i = 0; i < c; ++i) {
          qn[i] = NormalisedRow(p.q, t0 + i, d.H, hk, d.K, d.scale, p.qk_l2norm);
          kn[i] = NormalisedRow(p.k, t0 + i, d.H, hk, d.K, 1.0, p.qk_l2norm);
          const auto [g, b] = GateAt(p, t0 + i, hv);
          acc += g;
          gam[i] = acc;
          beta[i] = b;
        }
        // T = (I + L)^-1, L = strictly_lower(diag(beta) (K K^T (.) Gamma)), by forward substitution.
        std::vector<double> T(static_cast<std::size_t>(c) * c, 0.0);
        for (int i = 0; i < c; ++i) {
          T[i * c + i] = 1.0;
          for (int s = 0; s < i; ++s) {
            const double lis = beta[i] * Dot(kn[i], kn[s]) * std::exp(gam[i] - gam[s]);
            for (int col = 0; col <= s; ++col) T[i * c + col] -= lis * T[s * c + col];
          }
        }
        if (form == ChunkedForm::kFolded) {
          FoldedChunk(qn, kn, gam, beta, T, p.v.data() + (t0 * d.HV + hv) * d.V, static_cast<std::int64_t>(d.HV) * d.V,
                      d.K, d.V, out.o.data() + (t0 * d.HV + hv) * d.V, static_cast<std::int64_t>(d.HV) * d.V, h);
          continue;
        }
        // W = T diag(beta e^gamma) K (c x K), U = T diag(beta) V (c x V).
        std::vector<double> W(static_cast<std::size_t>(c) * d.K, 0.0), U(static_cast<std::size_t>(c) * d.V, 0.0);
        for (int i = 0; i < c; ++i) {
          for (int s = 0; s <= i; ++s) {
            const double tw = T[i * c + s] * beta[s] * std::exp(gam[s]);
            const double tu = T[i * c + s] * beta[s];
            const double* vs = p.v.data() + ((t0 + s) * d.HV + hv) * d.V;
            for (int x = 0; x < d.K; ++x) W[i * d.K + x] += tw * kn[s][x];
            for (int x = 0; x < d.V; ++x) U[i * d.V + x] += tu * vs[x];
          }
        }
        // V_new = U - W h
        std::vector<double> vn(U);
        for (int i = 0; i < c; ++i) {
          for (int x = 0; x < d.K; ++x) {
            const double wx = W[i * d.K + x];
            for (int j = 0; j < d.V; ++j) vn[i * d.V + j] -= wx * h[x * d.V + j];
          }
        }
        // O = diag(e^gamma) Q h + tril_incl(Q K^T (.) Gamma) V_new   (scale folded into qn)
        for (int i = 0; i < c; ++i) {
          double* o = out.o.data() + ((t0 + i) * d.HV + hv) * d.V;
          const double ei = std::exp(gam[i]);
          for (int x = 0; x < d.K; ++x) {
            const double qx = qn[i][x] * ei;
            for (int j = 0; j < d.V; ++j) o[j] += qx * h[x * d.V + j];
          }
          for (int s = 0; s <= i; ++s) {
            const double m = Dot(qn[i], kn[s]) * std::exp(gam[i] - gam[s]);
            for (int j = 0; j < d.V; ++j) o[j] += m * vn[s * d.V + j];
          }
        }
        // h = e^{gamma_last} h + (K (.) e^{gamma_last - gamma})^T V_new
        const double glast = gam[c - 1];
        for (double& x : h) x *= std::exp(glast);
        for (int s = 0; s < c; ++s) {
          const double f = std::exp(glast - gam[s]);
          for (int x = 0; x < d.K; ++x) {
            const double kx = kn[s][x] * f;
            for (int j = 0; j < d.V; ++j) h[x * d.V + j] += kx * vn[s * d.V + j];
          }
        }
      }
      std::copy(h.begin(), h.end(), out.ht.begin() + (static_cast<std::int64_t>(n) * d.HV + hv) * d.K * d.V);
    }
  }
  return out;
}

}  // namespace dflash::gdn
