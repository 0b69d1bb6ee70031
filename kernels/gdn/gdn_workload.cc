#include "kernels/gdn/gdn_workload.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include "kernels/gdn/gdn_api.h"
#include "kernels/gdn/gdn_config.h"
#include "kernels/gdn/reference.h"

namespace dflash::gdn {

std::vector<std::int32_t> RandomCuSeqlens(std::int64_t tokens, std::int64_t num_seqs, std::uint64_t seed) {
  std::vector<std::int32_t> cu{0};
  if (num_seqs <= 1 || tokens <= 1) {
    cu.push_back(static_cast<std::int32_t>(tokens));
    return cu;
  }
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> pick(1, tokens - 1);
  std::set<std::int64_t> cuts;
  while (static_cast<std::int64_t>(cuts.size()) < std::min(num_seqs - 1, tokens - 1)) cuts.insert(pick(rng));
  for (std::int64_t c : cuts) cu.push_back(static_cast<std::int32_t>(c));
  cu.push_back(static_cast<std::int32_t>(tokens));
  return cu;
}

namespace {

class GdnWorkload final : public tuner::Workload {
 public:
  GdnWorkload(const ProblemSpec& spec, InputForm form) : spec_(spec), form_(form) {}

  Status Init(std::uint64_t seed) {
    const std::int64_t T = spec_.tokens, H = spec_.heads, HV = spec_.value_heads, D = kHeadDim;
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    auto bf16_vec = [&](std::int64_t n, std::vector<std::uint16_t>& bits, std::vector<double>& as_double) {
      bits.resize(static_cast<std::size_t>(n));
      as_double.resize(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) {
        bits[i] = FloatToBf16(normal(rng));
        as_double[i] = Bf16ToFloat(bits[i]);
      }
    };
    ReferenceProblem rp;
    rp.heads = spec_.heads;
    rp.value_heads = spec_.value_heads;
    rp.key_dim = rp.value_dim = kHeadDim;
    cu_ = RandomCuSeqlens(T, spec_.num_seqs, rng());
    rp.cu_seqlens = cu_;
    bf16_vec(T * H * D, q_, rp.q);
    bf16_vec(T * H * D, k_, rp.k);
    if (!form_.qk_l2norm) {  // unit rows (to bf16 rounding) as a caller that normalised them would pass
      NormaliseRows(q_, rp.q);
      NormaliseRows(k_, rp.k);
      rp.qk_l2norm = false;
    }
    bf16_vec(T * HV * D, v_, rp.v);
    bf16_vec(T * HV, a_, rp.a);
    bf16_vec(T * HV, b_, rp.b);
    std::uniform_real_distribution<double> ua(0.5, 16.0), udt(std::log(1e-3), std::log(1e-1));
    alog_.resize(HV);
    dtb_.resize(HV);
    for (std::int64_t j = 0; j < HV; ++j) {
      alog_[j] = static_cast<float>(std::log(ua(rng)));
      dtb_[j] = static_cast<float>(std::log(std::expm1(std::exp(udt(rng)))));
    }
    rp.A_log.assign(alog_.begin(), alog_.end());
    rp.dt_bias.assign(dtb_.begin(), dtb_.end());
    if (form_.precomputed_gates) {  // the same gates, computed here in double and passed as fp32
      g_.resize(T * HV);
      beta_.resize(T * HV);
      for (std::int64_t i = 0; i < T * HV; ++i) {
        g_[i] = static_cast<float>(GateG(rp.a[i], rp.A_log[i % HV], rp.dt_bias[i % HV]));
        beta_[i] = static_cast<float>(GateBeta(rp.b[i]));
      }
      rp.g.assign(g_.begin(), g_.end());
      rp.beta.assign(beta_.begin(), beta_.end());
      rp.a.clear(), rp.b.clear(), rp.A_log.clear(), rp.dt_bias.clear();
    }
    const std::int64_t N = static_cast<std::int64_t>(cu_.size()) - 1;
    state_elems_ = static_cast<std::size_t>(N * HV * D * D);
    if (spec_.initial_state) {
      h0_.resize(state_elems_);
      for (float& x : h0_) x = 0.1f * normal(rng);
      rp.h0.assign(h0_.begin(), h0_.end());
    }
    DFLASH_ASSIGN_OR_RETURN(ref_, ReferenceRecurrent(rp));

    auto upload = [](gpu::DeviceBuffer& buf, const void* data, std::size_t bytes, const char* label) -> Status {
      DFLASH_ASSIGN_OR_RETURN(buf, gpu::DeviceBuffer::Alloc(std::max<std::size_t>(bytes, 16), label));
      return bytes ? buf.Upload(data, bytes) : Status::Ok();
    };
    const std::int64_t row = (2 * H + HV) * D;  // one_projection: a token's q heads, k heads, v heads
    if (form_.one_projection) {
      std::vector<std::uint16_t> qkv(static_cast<std::size_t>(T * row));
      for (std::int64_t t = 0; t < T; ++t) {
        std::copy_n(q_.begin() + t * H * D, H * D, qkv.begin() + t * row);
        std::copy_n(k_.begin() + t * H * D, H * D, qkv.begin() + t * row + H * D);
        std::copy_n(v_.begin() + t * HV * D, HV * D, qkv.begin() + t * row + 2 * H * D);
      }
      DFLASH_RETURN_IF_ERROR(upload(q_buf_, qkv.data(), qkv.size() * 2, "gdn qkv"));
    } else {
      DFLASH_RETURN_IF_ERROR(upload(q_buf_, q_.data(), q_.size() * 2, "gdn q"));
      DFLASH_RETURN_IF_ERROR(upload(k_buf_, k_.data(), k_.size() * 2, "gdn k"));
      DFLASH_RETURN_IF_ERROR(upload(v_buf_, v_.data(), v_.size() * 2, "gdn v"));
    }
    if (form_.precomputed_gates) {
      DFLASH_RETURN_IF_ERROR(upload(a_buf_, g_.data(), g_.size() * 4, "gdn g"));
      DFLASH_RETURN_IF_ERROR(upload(b_buf_, beta_.data(), beta_.size() * 4, "gdn beta"));
    } else {
      DFLASH_RETURN_IF_ERROR(upload(a_buf_, a_.data(), a_.size() * 2, "gdn a"));
      DFLASH_RETURN_IF_ERROR(upload(b_buf_, b_.data(), b_.size() * 2, "gdn b"));
      DFLASH_RETURN_IF_ERROR(upload(alog_buf_, alog_.data(), alog_.size() * 4, "gdn A_log"));
      DFLASH_RETURN_IF_ERROR(upload(dtb_buf_, dtb_.data(), dtb_.size() * 4, "gdn dt_bias"));
    }
    if (spec_.initial_state) DFLASH_RETURN_IF_ERROR(upload(h0_buf_, h0_.data(), h0_.size() * 4, "gdn h0"));
    DFLASH_ASSIGN_OR_RETURN(o_buf_, gpu::DeviceBuffer::Alloc(static_cast<std::size_t>(T * HV * D * 2), "gdn o"));
    if (spec_.final_state) {
      DFLASH_ASSIGN_OR_RETURN(ht_buf_, gpu::DeviceBuffer::Alloc(state_elems_ * 4, "gdn ht"));
    }
    args_ = GdnArgs::Contiguous(q_buf_.ptr(), k_buf_.ptr(), v_buf_.ptr(), a_buf_.ptr(), b_buf_.ptr(),
                                alog_buf_.ptr(), dtb_buf_.ptr(), o_buf_.ptr(), spec_.heads, spec_.value_heads, cu_);
    if (form_.precomputed_gates) {
      args_.g = a_buf_.ptr(), args_.beta = b_buf_.ptr();
      args_.a = args_.b = args_.A_log = args_.dt_bias = 0;
    }
    if (form_.one_projection) {
      args_.q = q_buf_.ptr();
      args_.k = q_buf_.ptr() + static_cast<CUdeviceptr>(H * D * 2);
      args_.v = q_buf_.ptr() + static_cast<CUdeviceptr>(2 * H * D * 2);
      args_.q_stride_t = args_.k_stride_t = args_.v_stride_t = row;
    }
    args_.qk_l2norm = form_.qk_l2norm;
    args_.h0 = spec_.initial_state ? h0_buf_.ptr() : 0;
    args_.ht = spec_.final_state ? ht_buf_.ptr() : 0;
    return Status::Ok();
  }

  Status PoisonOutputs(CUstream stream) override {
    DFLASH_RETURN_IF_ERROR(o_buf_.Fill(0xFF, stream));
    if (spec_.final_state) DFLASH_RETURN_IF_ERROR(ht_buf_.Fill(0xFF, stream));
    return Status::Ok();
  }

  Status Launch(const tuner::LoadedVariant& variant, CUstream stream) override {
    DFLASH_ASSIGN_OR_RETURN(Geometry g, GeometryOf(variant.config));
    if (!prepared_ || tuner::ConfigToJson(ConfigOf(g)) != tuner::ConfigToJson(ConfigOf(prepared_geometry_))) {
      // New plan for this geometry: wait until nothing reads the old workspace, then replace it.
      if (prepared_) {
        DFLASH_ASSIGN_OR_RETURN(const gpu::DriverApi* api, gpu::Driver());
        DFLASH_RETURN_IF_ERROR(gpu::CheckCu(api->StreamSynchronize(stream), "cuStreamSynchronize", "gdn workload"));
      }
      DFLASH_ASSIGN_OR_RETURN(std::size_t bytes, ChunkedWorkspaceBytes(g, args_));
      if (bytes > workspace_.size()) {
        workspace_ = gpu::DeviceBuffer();
        DFLASH_ASSIGN_OR_RETURN(workspace_, gpu::DeviceBuffer::Alloc(bytes, "gdn workspace"));
      }
      DFLASH_ASSIGN_OR_RETURN(prepared_plan_, PrepareChunkedForward(g, args_, workspace_.ptr(), workspace_.size()));
      prepared_geometry_ = g;
      prepared_ = true;
    }
    return LaunchPreparedForward(variant, prepared_plan_, args_, stream);
  }

  Status Check(CUstream stream) override {
    DFLASH_ASSIGN_OR_RETURN(const gpu::DriverApi* api, gpu::Driver());
    DFLASH_RETURN_IF_ERROR(gpu::CheckCu(api->StreamSynchronize(stream), "cuStreamSynchronize", "gdn check"));
    std::vector<std::uint16_t> o(ref_.o.size());
    DFLASH_RETURN_IF_ERROR(o_buf_.Download(o.data(), o.size() * 2));
    std::vector<double> od(o.size());
    for (std::size_t i = 0; i < o.size(); ++i) od[i] = Bf16ToFloat(o[i]);
    std::ostringstream msg;
    bool ok = true;
    ok &= Compare("o", od, ref_.o, msg);
    if (spec_.final_state) {
      std::vector<float> ht(state_elems_);
      DFLASH_RETURN_IF_ERROR(ht_buf_.Download(ht.data(), ht.size() * 4));
      ok &= Compare("ht", std::vector<double>(ht.begin(), ht.end()), ref_.ht, msg);
    }
    if (ok) return Status::Ok();
    return Status(ErrorCode::kMismatch, "gdn: " + msg.str());
  }

  std::size_t BytesTouched() const override {
    const std::size_t T = static_cast<std::size_t>(spec_.tokens), H = spec_.heads, HV = spec_.value_heads;
    std::size_t b = 2 * T * H * kHeadDim * 2 + 2 * T * HV * kHeadDim * 2 + 2 * T * HV * 2 + HV * 8;
    if (spec_.initial_state) b += state_elems_ * 4;
    if (spec_.final_state) b += state_elems_ * 4;
    return b;
  }

  // Recurrent-form operation count: per token and value head S^T k, k u^T and S^T q (2 K V each).
  double Flops() const override {
    return 6.0 * static_cast<double>(spec_.tokens) * spec_.value_heads * kHeadDim * kHeadDim;
  }

 private:
  static bool Compare(const char* name, const std::vector<double>& x, const std::vector<double>& ref,
                      std::ostringstream& msg) {
    double num = 0.0, den = 0.0, max_abs = 0.0;
    std::size_t nan = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (!std::isfinite(x[i])) {
        ++nan;
        continue;
      }
      const double d = x[i] - ref[i];
      num += d * d;
      den += ref[i] * ref[i];
      max_abs = std::max(max_abs, std::fabs(d));
    }
    const double rel = std::sqrt(num / std::max(den, 1e-300));
    const bool ok = nan == 0 && rel <= kRelL2Tol;
    if (!ok) {
      msg << name << ": rel L2 error " << rel << " (tolerance " << kRelL2Tol << "), max abs " << max_abs << ", "
          << nan << " non-finite of " << x.size() << "; ";
    }
    return ok;
  }

  // Each D-element row of bf16 `bits` L2-normalised (eps as the kernels') and rounded back; `as_double` follows.
  static void NormaliseRows(std::vector<std::uint16_t>& bits, std::vector<double>& as_double) {
    for (std::size_t r = 0; r < bits.size(); r += kHeadDim) {
      double ss = 0.0;
      for (int i = 0; i < kHeadDim; ++i) ss += as_double[r + i] * as_double[r + i];
      const double s = 1.0 / std::sqrt(ss + 1e-6);
      for (int i = 0; i < kHeadDim; ++i) {
        bits[r + i] = FloatToBf16(static_cast<float>(as_double[r + i] * s));
        as_double[r + i] = Bf16ToFloat(bits[r + i]);
      }
    }
  }

  ProblemSpec spec_;
  InputForm form_;
  std::vector<std::int32_t> cu_;
  std::vector<std::uint16_t> q_, k_, v_, a_, b_;
  std::vector<float> alog_, dtb_, h0_, g_, beta_;
  std::size_t state_elems_ = 0;
  ReferenceResult ref_;
  gpu::DeviceBuffer q_buf_, k_buf_, v_buf_, a_buf_, b_buf_, alog_buf_, dtb_buf_, h0_buf_, o_buf_, ht_buf_, workspace_;
  GdnArgs args_;
  bool prepared_ = false;
  Geometry prepared_geometry_;
  PreparedForward prepared_plan_;
};

}  // namespace

Result<std::unique_ptr<tuner::Workload>> MakeGdnWorkload(const gpu::Context& ctx, const ProblemSpec& spec,
                                                         std::uint64_t seed, InputForm form) {
  DFLASH_RETURN_IF_ERROR(ctx.MakeCurrent());
  auto w = std::make_unique<GdnWorkload>(spec, form);
  DFLASH_RETURN_IF_ERROR(w->Init(seed));
  return std::unique_ptr<tuner::Workload>(std::move(w));
}

}  // namespace dflash::gdn
