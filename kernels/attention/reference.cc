#include "kernels/attention/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/attention/attention_mask.cuh"

namespace dflash::attention {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double Dot(const std::uint16_t* a, const std::uint16_t* b, int d, Precision p) {
  if (p == Precision::kFloat64) {
    double s = 0;
    for (int i = 0; i < d; ++i) s += static_cast<double>(Bf16ToFloat(a[i])) * Bf16ToFloat(b[i]);
    return s;
  }
  float s = 0;
  for (int i = 0; i < d; ++i) s += Bf16ToFloat(a[i]) * Bf16ToFloat(b[i]);
  return RoundBf16(s);
}

// Scaled score of (q row, k row) in the chosen precision.
double Score(const HostInputs& in, const std::uint16_t* q, const std::uint16_t* k, Precision p) {
  const int d = static_cast<int>(in.spec.head_dim);
  if (p == Precision::kFloat64) return Dot(q, k, d, p) * in.scale;
  return RoundBf16(static_cast<float>(Dot(q, k, d, p)) * in.scale);
}

// Appends the document starts of one batch row's n blocks (see RandomInputs).
void AddDocStarts(const ProblemSpec& spec, std::mt19937_64& rng, std::vector<std::int32_t>::const_iterator anchors,
                  std::vector<std::int32_t>& out) {
  const auto ctx = static_cast<std::int32_t>(spec.ctx_len);
  std::vector<std::int32_t> cuts{0};
  std::uniform_int_distribution<std::int32_t> pos(1, std::max<std::int32_t>(1, ctx - 1));
  for (int i = 0; i < 6; ++i) {
    const std::int32_t c = pos(rng);
    cuts.push_back(i % 2 ? c / 64 * 64 : c);
  }
  std::sort(cuts.begin(), cuts.end());
  std::uniform_int_distribution<std::int32_t> any(0, ctx + 16);
  std::uniform_int_distribution<int> pick(0, 4);
  for (std::int64_t j = 0; j < spec.num_blocks(); ++j) {
    const std::int32_t a = anchors[j];
    std::int32_t start = 0;
    for (std::int32_t c : cuts)
      if (c <= a) start = c;
    out.push_back(pick(rng) == 0 ? any(rng) : start);
  }
}

}  // namespace

dflash_attn::MaskParams HostInputs::Mask() const {
  dflash_attn::MaskParams m{};
  m.kind = spec.mask;
  m.seq_q = static_cast<int>(spec.seq_q);
  m.seq_kv = static_cast<int>(spec.seq_kv);
  m.cu_seqlens = cu_seqlens.empty() ? nullptr : cu_seqlens.data();
  m.num_docs = static_cast<int>(spec.num_docs);
  m.anchors = anchors.empty() ? nullptr : anchors.data();
  m.block_valid = valid.empty() ? nullptr : valid.data();
  m.doc_start = doc_start.empty() ? nullptr : doc_start.data();
  m.num_blocks = spec.is_dflash() ? static_cast<int>(spec.num_blocks()) : 0;
  m.block_size = static_cast<int>(spec.block_size);
  m.ctx_len = static_cast<int>(spec.ctx_len);
  m.window = static_cast<int>(spec.window);
  return m;
}

HostInputs RandomInputs(const ProblemSpec& spec, std::uint64_t seed) {
  HostInputs in;
  in.spec = spec;
  in.scale = 1.0f / std::sqrt(static_cast<float>(spec.head_dim));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](std::vector<std::uint16_t>& v, std::int64_t n) {
    v.resize(static_cast<std::size_t>(n));
    for (auto& x : v) x = FloatToBf16(normal(rng));
  };
  fill(in.q, spec.batch * spec.seq_q * spec.heads_q * spec.head_dim);
  fill(in.dout, spec.batch * spec.seq_q * spec.heads_q * spec.head_dim);
  fill(in.k, spec.batch * spec.seq_kv * spec.heads_kv * spec.head_dim);
  fill(in.v, spec.batch * spec.seq_kv * spec.heads_kv * spec.head_dim);
  if (spec.mask == dflash_attn::kMaskDocCausal) {
    // num_docs - 1 random cut points in (0, seq); the last document ends one row early when there is room,
    // so that padding rows (which see nothing) are exercised.
    std::vector<std::int32_t> cuts;
    std::uniform_int_distribution<std::int64_t> pos(1, std::max<std::int64_t>(1, spec.seq_q - 1));
    for (std::int64_t i = 0; i + 1 < spec.num_docs; ++i) cuts.push_back(static_cast<std::int32_t>(pos(rng)));
    std::sort(cuts.begin(), cuts.end());
    in.cu_seqlens.push_back(0);
    for (auto c : cuts) in.cu_seqlens.push_back(c);
    in.cu_seqlens.push_back(static_cast<std::int32_t>(spec.seq_q > 2 ? spec.seq_q - 1 : spec.seq_q));
    in.cu_seqlens.back() = std::max(in.cu_seqlens.back(), in.cu_seqlens[in.cu_seqlens.size() - 2]);
  }
  if (spec.is_dflash()) {
    const std::int64_t n = spec.num_blocks();
    const std::int64_t invalid = n >= 4 ? 1 : 0;
    std::uniform_int_distribution<std::int32_t> pos(1, static_cast<std::int32_t>(std::max<std::int64_t>(1, spec.ctx_len - 1)));
    for (std::int64_t b = 0; b < spec.batch; ++b) {
      std::vector<std::int32_t> a(static_cast<std::size_t>(n - invalid));
      for (auto& x : a) x = spec.ctx_len > 1 ? pos(rng) : 0;
      std::sort(a.begin(), a.end());
      for (std::int64_t j = 0; j < n; ++j) {
        in.anchors.push_back(j < n - invalid ? a[static_cast<std::size_t>(j)] : 0);
        in.valid.push_back(j < n - invalid ? 1 : 0);
      }
      if (spec.doc_bound) AddDocStarts(spec, rng, in.anchors.end() - n, in.doc_start);
    }
  }
  return in;
}

double VisiblePairs(const HostInputs& in) {
  const dflash_attn::MaskParams m = in.Mask();
  double pairs = 0;
  for (int b = 0; b < in.spec.batch; ++b)
    for (int q = 0; q < in.spec.seq_q; ++q) pairs += dflash_attn::SpanCount(dflash_attn::RowVisibleSpan(m, b, q));
  return pairs;
}

RowForward ForwardRow(const HostInputs& in, int b, int h, int q, Precision p) {
  const int d = static_cast<int>(in.spec.head_dim);
  const int hk = static_cast<int>(h / (in.spec.heads_q / in.spec.heads_kv));
  const dflash_attn::MaskParams m = in.Mask();
  const dflash_attn::RowSpan span = dflash_attn::RowVisibleSpan(m, b, q);
  RowForward r;
  r.o.assign(static_cast<std::size_t>(d), 0.0);
  r.lse = kNegInf;
  std::vector<int> kvs;
  std::vector<double> s;
  for (int kv = 0; kv < in.spec.seq_kv; ++kv) {
    if (!dflash_attn::InSpan(span, kv)) continue;
    kvs.push_back(kv);
    s.push_back(Score(in, in.QRow(b, h, q), in.KRow(b, hk, kv), p));
  }
  if (!kvs.empty()) {
    const double mx = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double x : s) sum += std::exp(x - mx);
    r.lse = mx + std::log(sum);
    std::vector<float> acc(static_cast<std::size_t>(d), 0.0f);
    for (std::size_t j = 0; j < kvs.size(); ++j) {
      const std::uint16_t* vr = in.VRow(b, hk, kvs[j]);
      if (p == Precision::kFloat64) {
        const double pj = std::exp(s[j] - r.lse);
        for (int i = 0; i < d; ++i) r.o[i] += pj * Bf16ToFloat(vr[i]);
      } else {
        const float pj = RoundBf16(static_cast<float>(std::exp(s[j] - r.lse)));
        for (int i = 0; i < d; ++i) acc[i] += pj * Bf16ToFloat(vr[i]);
      }
    }
    if (p == Precision::kPlainBf16)
      for (int i = 0; i < d; ++i) r.o[i] = RoundBf16(acc[i]);
  }
  const std::uint16_t* dor = in.DoRow(b, h, q);
  for (int i = 0; i < d; ++i) r.delta += r.o[i] * Bf16ToFloat(dor[i]);
  return r;
}

const RowForward& RowCache::Row(int b, int h, int q) {
  auto key = std::make_tuple(b, h, q);
  auto it = rows_.find(key);
  if (it != rows_.end()) return it->second;
  return rows_.emplace(key, ForwardRow(in_, b, h, q, p_)).first->second;
}

namespace {
// dS (already multiplied by the softmax scale) of one visible pair, and P.
void Pair(const HostInputs& in, const RowForward& row, int b, int h, int q, int hk, int kv, Precision p, double& prob,
          double& ds) {
  const int d = static_cast<int>(in.spec.head_dim);
  const double s = Score(in, in.QRow(b, h, q), in.KRow(b, hk, kv), p);
  prob = std::exp(s - row.lse);
  double dp = Dot(in.DoRow(b, h, q), in.VRow(b, hk, kv), d, p);
  if (p == Precision::kPlainBf16) {
    prob = RoundBf16(static_cast<float>(prob));
    ds = RoundBf16(RoundBf16(static_cast<float>(prob * (dp - row.delta))) * in.scale);
  } else {
    ds = prob * (dp - row.delta) * in.scale;
  }
}
}  // namespace

std::vector<double> DqRow(const HostInputs& in, RowCache& rows, int b, int h, int q, Precision p) {
  const int d = static_cast<int>(in.spec.head_dim);
  const int hk = static_cast<int>(h / (in.spec.heads_q / in.spec.heads_kv));
  const RowForward& row = rows.Row(b, h, q);
  const dflash_attn::RowSpan span = dflash_attn::RowVisibleSpan(in.Mask(), b, q);
  std::vector<double> dq(static_cast<std::size_t>(d), 0.0);
  for (int kv = 0; kv < in.spec.seq_kv; ++kv) {
    if (!dflash_attn::InSpan(span, kv)) continue;
    double prob, ds;
    Pair(in, row, b, h, q, hk, kv, p, prob, ds);
    const std::uint16_t* kr = in.KRow(b, hk, kv);
    for (int i = 0; i < d; ++i) dq[i] += ds * Bf16ToFloat(kr[i]);
  }
  if (p == Precision::kPlainBf16)
    for (auto& x : dq) x = RoundBf16(static_cast<float>(x));
  return dq;
}

void KvRowGrads(const HostInputs& in, RowCache& rows, int b, int hk, int kv, Precision p, std::vector<double>& dk,
                std::vector<double>& dv) {
  const int d = static_cast<int>(in.spec.head_dim);
  const int g = static_cast<int>(in.spec.heads_q / in.spec.heads_kv);
  const dflash_attn::MaskParams m = in.Mask();
  dk.assign(static_cast<std::size_t>(d), 0.0);
  dv.assign(static_cast<std::size_t>(d), 0.0);
  for (int q = 0; q < in.spec.seq_q; ++q) {
    if (!dflash_attn::IsVisible(m, b, q, kv)) continue;
    for (int h = hk * g; h < (hk + 1) * g; ++h) {
      const RowForward& row = rows.Row(b, h, q);
      double prob, ds;
      Pair(in, row, b, h, q, hk, kv, p, prob, ds);
      const std::uint16_t* qr = in.QRow(b, h, q);
      const std::uint16_t* dor = in.DoRow(b, h, q);
      for (int i = 0; i < d; ++i) {
        dk[i] += ds * Bf16ToFloat(qr[i]);
        dv[i] += prob * Bf16ToFloat(dor[i]);
      }
    }
  }
  if (p == Precision::kPlainBf16) {
    for (auto& x : dk) x = RoundBf16(static_cast<float>(x));
    for (auto& x : dv) x = RoundBf16(static_cast<float>(x));
  }
}

}  // namespace dflash::attention
