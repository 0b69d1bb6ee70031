#include "kernels/attention/attention_workload.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention/attention_api.h"
#include "kernels/attention/attention_config.h"
#include "kernels/attention/attention_mask.cuh"
#include "kernels/attention/attention_params.cuh"
#include "kernels/attention/attention_tolerance.h"
#include "kernels/attention/reference.h"
#include "tuner/gpu_runtime.h"

namespace dflash::attention {
namespace {

constexpr int kSampleRows = 256;
constexpr std::size_t kKvRowBudget = 2048;

tuner::Config DefaultForwardConfig() { return {{"block_m", 64}, {"block_n", 64}, {"warps", 4}, {"stages", 2}}; }

class AttentionWorkload final : public tuner::Workload {
 public:
  AttentionWorkload(const ProblemSpec& spec, Direction dir) : dir_(dir) { in_.spec = spec; }

  Status Init(std::uint64_t seed) {
    in_ = RandomInputs(in_.spec, seed);
    const ProblemSpec& s = in_.spec;
    const std::size_t qn = in_.q.size(), kn = in_.k.size();
    rows_ = static_cast<std::size_t>(s.batch * s.heads_q * s.seq_q);
    DFLASH_ASSIGN_OR_RETURN(q_, gpu::DeviceBuffer::Alloc(qn * 2, "attention q"));
    DFLASH_ASSIGN_OR_RETURN(k_, gpu::DeviceBuffer::Alloc(kn * 2, "attention k"));
    DFLASH_ASSIGN_OR_RETURN(v_, gpu::DeviceBuffer::Alloc(kn * 2, "attention v"));
    DFLASH_ASSIGN_OR_RETURN(o_, gpu::DeviceBuffer::Alloc(qn * 2, "attention o"));
    DFLASH_ASSIGN_OR_RETURN(lse_, gpu::DeviceBuffer::Alloc(rows_ * 4, "attention lse"));
    DFLASH_RETURN_IF_ERROR(q_.Upload(in_.q.data(), qn * 2));
    DFLASH_RETURN_IF_ERROR(k_.Upload(in_.k.data(), kn * 2));
    DFLASH_RETURN_IF_ERROR(v_.Upload(in_.v.data(), kn * 2));
    if (dir_ == Direction::kBackward) {
      DFLASH_ASSIGN_OR_RETURN(do_, gpu::DeviceBuffer::Alloc(qn * 2, "attention dout"));
      DFLASH_ASSIGN_OR_RETURN(dq_, gpu::DeviceBuffer::Alloc(qn * 2, "attention dq"));
      DFLASH_ASSIGN_OR_RETURN(dk_, gpu::DeviceBuffer::Alloc(kn * 2, "attention dk"));
      DFLASH_ASSIGN_OR_RETURN(dv_, gpu::DeviceBuffer::Alloc(kn * 2, "attention dv"));
      DFLASH_RETURN_IF_ERROR(do_.Upload(in_.dout.data(), qn * 2));
    }
    if (!in_.cu_seqlens.empty()) {
      DFLASH_ASSIGN_OR_RETURN(cu_, gpu::DeviceBuffer::Alloc(in_.cu_seqlens.size() * 4, "attention cu_seqlens"));
      DFLASH_RETURN_IF_ERROR(cu_.Upload(in_.cu_seqlens.data(), in_.cu_seqlens.size() * 4));
    }
    if (!in_.anchors.empty()) {
      DFLASH_ASSIGN_OR_RETURN(anchors_, gpu::DeviceBuffer::Alloc(in_.anchors.size() * 4, "attention anchors"));
      DFLASH_RETURN_IF_ERROR(anchors_.Upload(in_.anchors.data(), in_.anchors.size() * 4));
      DFLASH_ASSIGN_OR_RETURN(valid_, gpu::DeviceBuffer::Alloc(in_.valid.size(), "attention block_valid"));
      DFLASH_RETURN_IF_ERROR(valid_.Upload(in_.valid.data(), in_.valid.size()));
    }
    if (!in_.doc_start.empty()) {
      DFLASH_ASSIGN_OR_RETURN(doc_start_buf_,
                              gpu::DeviceBuffer::Alloc(in_.doc_start.size() * 4, "attention doc_start"));
      DFLASH_RETURN_IF_ERROR(doc_start_buf_.Upload(in_.doc_start.data(), in_.doc_start.size() * 4));
    }
    pairs_ = VisiblePairs(in_);
    return Status::Ok();
  }

  Status PoisonOutputs(CUstream stream) override {
    if (dir_ == Direction::kForward) {
      DFLASH_RETURN_IF_ERROR(o_.Fill(0xFF, stream));
      return lse_.Fill(0xFF, stream);
    }
    DFLASH_RETURN_IF_ERROR(dq_.Fill(0xFF, stream));
    DFLASH_RETURN_IF_ERROR(dk_.Fill(0xFF, stream));
    DFLASH_RETURN_IF_ERROR(dv_.Fill(0xFF, stream));
    if (ws_.size()) DFLASH_RETURN_IF_ERROR(ws_.Fill(0xFF, stream));
    return Status::Ok();
  }

  Status Launch(const tuner::LoadedVariant& variant, CUstream stream) override {
    AttentionArgs a = Args();
    if (dir_ == Direction::kForward) return LaunchForward(variant, a, stream);
    if (!have_forward_) {
      // O and LSE from the forward kernel the backward variant carries (default forward config).
      tuner::LoadedVariant fwd = variant;
      fwd.config = DefaultForwardConfig();
      DFLASH_RETURN_IF_ERROR(LaunchForward(fwd, a, stream).WithContext("backward workload's forward"));
      have_forward_ = true;
    }
    const std::size_t need = BackwardWorkspaceBytes(in_.spec, variant.config);
    if (ws_.size() < need) {
      DFLASH_ASSIGN_OR_RETURN(ws_, gpu::DeviceBuffer::Alloc(need, "attention backward workspace"));
    }
    return LaunchBackward(variant, a, ws_.ptr(), ws_.size(), stream);
  }

  Status Check(CUstream stream) override {
    DFLASH_ASSIGN_OR_RETURN(const gpu::DriverApi* api, gpu::Driver());
    DFLASH_RETURN_IF_ERROR(gpu::CheckCu(api->StreamSynchronize(stream), "cuStreamSynchronize", "attention check"));
    const ProblemSpec& s = in_.spec;
    BuildReference();
    std::vector<std::uint16_t> o_or_dq(in_.q.size());
    std::vector<float> lse(rows_);
    if (dir_ == Direction::kForward) {
      DFLASH_RETURN_IF_ERROR(o_.Download(o_or_dq.data(), o_or_dq.size() * 2));
      DFLASH_RETURN_IF_ERROR(lse_.Download(lse.data(), lse.size() * 4));
    } else {
      DFLASH_RETURN_IF_ERROR(dq_.Download(o_or_dq.data(), o_or_dq.size() * 2));
    }
    ErrorTally t_o{"O"}, t_lse{"LSE"}, t_dq{"dQ"}, t_dk{"dK"}, t_dv{"dV"};
    bool empty_rows_ok = true;
    const int d = static_cast<int>(s.head_dim);
    for (const RefRow& r : ref_rows_) {
      const std::uint16_t* got = &o_or_dq[in_.Off(r.b, r.h, r.q, s.seq_q, s.heads_q)];
      if (dir_ == Direction::kForward) {
        const float l = lse[r.idx];
        if (std::isinf(r.lse_exact)) {
          empty_rows_ok &= l == -std::numeric_limits<float>::infinity();
          for (int i = 0; i < d; ++i) empty_rows_ok &= Bf16ToFloat(got[i]) == 0.0f;
          continue;
        }
        t_lse.Add(l, r.lse_exact, r.lse_plain);
      }
      ErrorTally& t = dir_ == Direction::kForward ? t_o : t_dq;
      for (int i = 0; i < d; ++i) t.Add(Bf16ToFloat(got[i]), r.exact[i], r.plain[i]);
    }
    if (dir_ == Direction::kBackward) {
      std::vector<std::uint16_t> dk(in_.k.size()), dv(in_.k.size());
      DFLASH_RETURN_IF_ERROR(dk_.Download(dk.data(), dk.size() * 2));
      DFLASH_RETURN_IF_ERROR(dv_.Download(dv.data(), dv.size() * 2));
      for (const RefKv& r : ref_kv_) {
        const std::size_t off = in_.Off(r.b, r.hk, r.kv, s.seq_kv, s.heads_kv);
        for (int i = 0; i < d; ++i) {
          t_dk.Add(Bf16ToFloat(dk[off + i]), r.dk_exact[i], r.dk_plain[i]);
          t_dv.Add(Bf16ToFloat(dv[off + i]), r.dv_exact[i], r.dv_plain[i]);
        }
      }
    }
    std::string fails;
    for (const ErrorTally* t : {&t_o, &t_lse, &t_dq, &t_dk, &t_dv})
      if (!t->ok()) fails += (fails.empty() ? "" : "; ") + t->ToString();
    if (!empty_rows_ok) fails += (fails.empty() ? "" : "; ") + std::string("rows that see nothing are not 0 / -inf");
    if (!fails.empty()) return {ErrorCode::kMismatch, "attention " + std::string(MaskName(s.mask)) + ": " + fails};
    return Status::Ok();
  }

  std::size_t BytesTouched() const override {
    const std::size_t qb = in_.q.size() * 2, kb = in_.k.size() * 2;
    if (dir_ == Direction::kForward) return 2 * qb + 2 * kb + rows_ * 4;
    return 4 * qb + 4 * kb + rows_ * 8;  // q, o, dout, dq; k, v, dk, dv; lse, delta
  }

  double Flops() const override {
    const double f = 4.0 * pairs_ * static_cast<double>(in_.spec.head_dim * in_.spec.heads_q);
    return dir_ == Direction::kForward ? f : 2.5 * f;
  }

 private:
  AttentionArgs Args() const {
    const ProblemSpec& s = in_.spec;
    AttentionArgs a;
    a.problem = s;
    a.q = TensorRef::Bshd(q_.ptr(), s.seq_q, s.heads_q, s.head_dim);
    a.k = TensorRef::Bshd(k_.ptr(), s.seq_kv, s.heads_kv, s.head_dim);
    a.v = TensorRef::Bshd(v_.ptr(), s.seq_kv, s.heads_kv, s.head_dim);
    a.o = TensorRef::Bshd(o_.ptr(), s.seq_q, s.heads_q, s.head_dim);
    a.lse = lse_.ptr();
    if (dir_ == Direction::kBackward) {
      a.dout = TensorRef::Bshd(do_.ptr(), s.seq_q, s.heads_q, s.head_dim);
      a.dq = TensorRef::Bshd(dq_.ptr(), s.seq_q, s.heads_q, s.head_dim);
      a.dk = TensorRef::Bshd(dk_.ptr(), s.seq_kv, s.heads_kv, s.head_dim);
      a.dv = TensorRef::Bshd(dv_.ptr(), s.seq_kv, s.heads_kv, s.head_dim);
    }
    a.cu_seqlens = cu_.ptr();
    a.anchors = anchors_.ptr();
    a.block_valid = valid_.ptr();
    a.doc_start = doc_start_buf_.ptr();
    a.scale = in_.scale;
    return a;
  }

  // Every row of a small problem, else kSampleRows spread evenly over (batch, head, query).
  std::vector<std::size_t> SampleRows() const {
    std::vector<std::size_t> out;
    if (rows_ <= 2 * kSampleRows) {
      for (std::size_t i = 0; i < rows_; ++i) out.push_back(i);
      return out;
    }
    for (int i = 0; i < kSampleRows; ++i) out.push_back(static_cast<std::size_t>(i) * rows_ / kSampleRows + (i * 7919) % 13);
    for (auto& x : out) x = std::min(x, rows_ - 1);
    return out;
  }

  // kv rows whose reference needs at most kKvRowBudget distinct forward rows in total, cheapest first.
  std::vector<std::tuple<int, int, int>> SampleKvRows() const {
    const ProblemSpec& s = in_.spec;
    const dflash_attn::MaskParams m = in_.Mask();
    const int g = static_cast<int>(s.heads_q / s.heads_kv);
    struct Cand { std::size_t cost; int b, hk, kv; };
    std::vector<Cand> cands;
    std::vector<int> kvs;
    const int step = static_cast<int>(std::max<std::int64_t>(1, s.seq_kv / 64));
    for (int kv = 0; kv < s.seq_kv; kv += step) kvs.push_back(kv);
    for (int kv = static_cast<int>(std::max<std::int64_t>(0, s.seq_kv - 16)); kv < s.seq_kv; ++kv) kvs.push_back(kv);
    if (s.is_dflash()) {  // the block rows of a middle block
      const int base = static_cast<int>(s.ctx_len + s.num_blocks() / 2 * s.block_size);
      for (int i = 0; i < s.block_size; ++i) kvs.push_back(base + i);
    }
    std::sort(kvs.begin(), kvs.end());
    kvs.erase(std::unique(kvs.begin(), kvs.end()), kvs.end());
    for (int b = 0; b < s.batch; ++b)
      for (int kv : kvs) {
        std::size_t seen = 0;
        for (int q = 0; q < s.seq_q; ++q) seen += dflash_attn::IsVisible(m, b, q, kv);
        const int hk = static_cast<int>((kv + b) % s.heads_kv);
        cands.push_back({seen * static_cast<std::size_t>(g), b, hk, kv});
      }
    std::stable_sort(cands.begin(), cands.end(), [](const Cand& x, const Cand& y) { return x.cost < y.cost; });
    std::vector<std::tuple<int, int, int>> out;
    std::size_t used = 0;
    for (const Cand& c : cands) {
      if (used + c.cost > kKvRowBudget && !out.empty()) break;
      used += c.cost;
      out.emplace_back(c.b, c.hk, c.kv);
    }
    // Besides the cheapest rows, always one kv row that many rows see, when it fits twice the budget.
    for (auto it = cands.rbegin(); it != cands.rend(); ++it)
      if (it->cost > 0 && it->cost <= kKvRowBudget) {
        out.emplace_back(it->b, it->hk, it->kv);
        break;
      }
    return out;
  }

  // The reference values of the checked rows, computed once per workload (first Check).
  struct RefRow {
    std::size_t idx;
    int b, h, q;
    std::vector<double> exact, plain;  // O (forward) or dQ (backward)
    double lse_exact = 0, lse_plain = 0;
  };
  struct RefKv {
    int b, hk, kv;
    std::vector<double> dk_exact, dv_exact, dk_plain, dv_plain;
  };
  void BuildReference() {
    if (ref_ready_) return;
    const ProblemSpec& s = in_.spec;
    RowCache exact(in_, Precision::kFloat64), plain(in_, Precision::kPlainBf16);
    for (std::size_t idx : SampleRows()) {
      RefRow r;
      r.idx = idx;
      r.q = static_cast<int>(idx % s.seq_q);
      r.h = static_cast<int>(idx / s.seq_q % s.heads_q);
      r.b = static_cast<int>(idx / s.seq_q / s.heads_q);
      if (dir_ == Direction::kForward) {
        const RowForward& e = exact.Row(r.b, r.h, r.q);
        const RowForward& p = plain.Row(r.b, r.h, r.q);
        r.exact = e.o;
        r.plain = p.o;
        r.lse_exact = e.lse;
        r.lse_plain = p.lse;
      } else {
        r.exact = DqRow(in_, exact, r.b, r.h, r.q, Precision::kFloat64);
        r.plain = DqRow(in_, plain, r.b, r.h, r.q, Precision::kPlainBf16);
      }
      ref_rows_.push_back(std::move(r));
    }
    if (dir_ == Direction::kBackward) {
      for (auto [b, hk, kv] : SampleKvRows()) {
        RefKv r{b, hk, kv, {}, {}, {}, {}};
        KvRowGrads(in_, exact, b, hk, kv, Precision::kFloat64, r.dk_exact, r.dv_exact);
        KvRowGrads(in_, plain, b, hk, kv, Precision::kPlainBf16, r.dk_plain, r.dv_plain);
        ref_kv_.push_back(std::move(r));
      }
    }
    ref_ready_ = true;
  }

  Direction dir_;
  HostInputs in_;
  bool ref_ready_ = false;
  std::vector<RefRow> ref_rows_;
  std::vector<RefKv> ref_kv_;
  std::size_t rows_ = 0;
  double pairs_ = 0;
  bool have_forward_ = false;
  gpu::DeviceBuffer q_, k_, v_, o_, lse_, do_, dq_, dk_, dv_, cu_, anchors_, valid_, doc_start_buf_, ws_;
};

}  // namespace

KernelLaunch BackwardHelperForwardLaunch(const ProblemSpec& p) {
  return ForwardLaunches(DefaultForwardConfig(), p).front();
}

Result<std::unique_ptr<tuner::Workload>> MakeAttentionWorkload(const ProblemSpec& spec, Direction direction,
                                                               std::uint64_t seed) {
  auto w = std::make_unique<AttentionWorkload>(spec, direction);
  DFLASH_RETURN_IF_ERROR(w->Init(seed));
  return std::unique_ptr<tuner::Workload>(std::move(w));
}

}  // namespace dflash::attention
