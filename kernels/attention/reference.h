// The CPU reference of the attention families: exact float64 math, and a "plain bf16" emulation of the same math
// (bf16 matmul outputs, fp32 softmax, bf16 probabilities) that serves as the error yardstick of the FlashAttention
// test convention (kernel error <= 2 x plain-bf16 error). Row-wise, so a check can afford a sample of rows of a
// large problem. Also the host bf16 conversions and the host-side random problem instance.
// Who may call it: the attention workloads and tests. Thread-safety: pure functions; RowCache belongs to one thread.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/attention/attention_params.cuh"
#include "kernels/attention/attention_problem.h"
#include "kernels/bf16.h"

namespace dflash::attention {

inline float RoundBf16(float f) { return Bf16ToFloat(FloatToBf16(f)); }

// A problem instance on the host: q, dout [B, Sq, Hq, D], k, v [B, Skv, Hkv, D] contiguous bf16 bits.
struct HostInputs {
  ProblemSpec spec;
  float scale = 0.0f;
  std::vector<std::uint16_t> q, k, v, dout;
  std::vector<std::int32_t> cu_seqlens;
  std::vector<std::int32_t> anchors;   // [B, num_blocks]
  std::vector<std::uint8_t> valid;     // [B, num_blocks]
  std::vector<std::int32_t> doc_start; // [B, num_blocks] (packed rows), or empty: no document bound
  dflash_attn::MaskParams Mask() const;  // points into this object
  const std::uint16_t* QRow(int b, int h, int s) const { return &q[Off(b, h, s, spec.seq_q, spec.heads_q)]; }
  const std::uint16_t* DoRow(int b, int h, int s) const { return &dout[Off(b, h, s, spec.seq_q, spec.heads_q)]; }
  const std::uint16_t* KRow(int b, int h, int s) const { return &k[Off(b, h, s, spec.seq_kv, spec.heads_kv)]; }
  const std::uint16_t* VRow(int b, int h, int s) const { return &v[Off(b, h, s, spec.seq_kv, spec.heads_kv)]; }
  std::size_t Off(int b, int h, int s, std::int64_t seq, std::int64_t heads) const {
    return static_cast<std::size_t>(((b * seq + s) * heads + h) * spec.head_dim);
  }
};

// Fresh random inputs (normal q, k, v, dout; sorted random anchors with the last block invalid when there are at
// least 4; random document boundaries) for `spec`. With spec.doc_bound, also per-block document starts of packed
// rows: the start of the random document (cut points, half of them multiples of 64 so that whole tiles
// fall on either side) that holds each anchor, and for about one block in five an arbitrary value in
// [0, ctx_len + 16] (also past the anchor: no context at all).
HostInputs RandomInputs(const ProblemSpec& spec, std::uint64_t seed);

// Attended (q, kv) pairs summed over batches (one head): the FLOP count's unit.
double VisiblePairs(const HostInputs& in);

enum class Precision { kFloat64, kPlainBf16 };

struct RowForward {
  std::vector<double> o;   // zeros for a row that sees nothing
  double lse = 0.0;        // -inf for a row that sees nothing
  double delta = 0.0;      // rowsum(dO * O)
};

// Per-row forward results, memoized (the dK/dV reference needs them for every row that sees a kv row).
class RowCache {
 public:
  RowCache(const HostInputs& in, Precision p) : in_(in), p_(p) {}
  const RowForward& Row(int b, int h, int q);
  std::size_t size() const { return rows_.size(); }

 private:
  const HostInputs& in_;
  Precision p_;
  std::map<std::tuple<int, int, int>, RowForward> rows_;
};

RowForward ForwardRow(const HostInputs& in, int b, int h, int q, Precision p);
std::vector<double> DqRow(const HostInputs& in, RowCache& rows, int b, int h, int q, Precision p);
// dK and dV of kv row `kv` of kv head hk (summed over the GQA group).
void KvRowGrads(const HostInputs& in, RowCache& rows, int b, int hk, int kv, Precision p, std::vector<double>& dk,
                std::vector<double>& dv);

}  // namespace dflash::attention
