#include "kernels/rmsnorm/rmsnorm_workload.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/rmsnorm/reference.h"
#include "kernels/rmsnorm/row_buffer.h"
#include "kernels/rmsnorm/rmsnorm_api.h"

namespace dflash::rmsnorm {
namespace {

class RmsNormWorkload final : public tuner::Workload {
 public:
  RmsNormWorkload(const ProblemSpec& spec, const WorkloadOptions& opt) : spec_(spec), opt_(opt) {}

  Status Init(std::uint64_t seed) {
    const std::int64_t R = spec_.rows, C = spec_.cols;
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-6, 6);
    Shape(x_, opt_.x_pad);
    if (spec_.residual) Shape(r_, opt_.residual_pad);
    if (spec_.gate) Shape(z_, opt_.gate_pad);
    Shape(out_, opt_.out_pad);
    if (spec_.residual && opt_.write_sum && !opt_.sum_in_place) Shape(sum_, opt_.sum_out_pad);
    for (std::int64_t i = 0; i < R; ++i) {
      const float scale = std::ldexp(1.0f, exponent(rng));
      for (std::int64_t c = 0; c < C; ++c) {
        x_.at(i, c) = FloatToBf16(scale * normal(rng));
        if (spec_.residual) r_.at(i, c) = FloatToBf16(scale * normal(rng));
        if (spec_.gate) z_.at(i, c) = FloatToBf16(2.0f * normal(rng));
      }
    }
    const float w_range = spec_.kind == Kind::kZeroCentred ? 0.9f : 2.0f;
    std::uniform_real_distribution<float> uniform(-w_range, w_range);
    if (spec_.weight == WeightDtype::kFp32) {
      w32_.resize(static_cast<std::size_t>(C));
      for (auto& v : w32_) v = uniform(rng);
    } else {
      w16_.resize(static_cast<std::size_t>(C));
      for (auto& v : w16_) v = FloatToBf16(uniform(rng));
    }

    ReferenceInput in;
    in.x = x_.host;
    in.x_stride = x_.stride;
    in.residual = r_.host;
    in.residual_stride = r_.stride;
    in.gate = z_.host;
    in.gate_stride = z_.stride;
    in.weight_bf16 = w16_;
    in.weight_fp32 = w32_;
    in.rows = R;
    in.cols = C;
    in.kind = spec_.kind;
    in.eps = opt_.eps;
    ref_ = ReferenceRmsNorm(in);

    for (RowBuffer* t : {&x_, &r_, &z_, &sum_, &out_}) {
      if (t->host.empty()) continue;
      DFLASH_ASSIGN_OR_RETURN(t->dev, gpu::DeviceBuffer::Alloc(t->bytes(), "rmsnorm tensor"));
      DFLASH_RETURN_IF_ERROR(t->dev.Upload(t->host.data(), t->bytes()));
    }
    if (spec_.residual && opt_.sum_in_place) {
      DFLASH_ASSIGN_OR_RETURN(r_pristine_, gpu::DeviceBuffer::Alloc(r_.bytes(), "rmsnorm residual (pristine)"));
      DFLASH_RETURN_IF_ERROR(r_pristine_.Upload(r_.host.data(), r_.bytes()));
    }
    const std::size_t w_bytes = w32_.empty() ? w16_.size() * 2 : w32_.size() * 4;
    DFLASH_ASSIGN_OR_RETURN(w_buf_, gpu::DeviceBuffer::Alloc(w_bytes, "rmsnorm weight"));
    DFLASH_RETURN_IF_ERROR(w_buf_.Upload(w32_.empty() ? static_cast<const void*>(w16_.data()) : w32_.data(), w_bytes));
    return Status::Ok();
  }

  // In place, the residual is both an input and the sum's output: it is restored from its pristine copy instead.
  Status PoisonOutputs(CUstream stream) override {
    DFLASH_RETURN_IF_ERROR(out_.dev.Fill(0xFF, stream));
    if (!sum_.host.empty()) DFLASH_RETURN_IF_ERROR(sum_.dev.Fill(0xFF, stream));
    if (r_pristine_.size() > 0) {
      DFLASH_ASSIGN_OR_RETURN(const gpu::DriverApi* api, gpu::Driver());
      DFLASH_RETURN_IF_ERROR(gpu::CheckCu(
          api->MemcpyDtoDAsync(r_.dev.ptr(), r_pristine_.ptr(), r_.bytes(), stream), "cuMemcpyDtoDAsync",
          "rmsnorm residual restore"));
    }
    return Status::Ok();
  }

  Status Launch(const tuner::LoadedVariant& variant, CUstream stream) override {
    RmsNormArgs a;
    a.x = x_.dev.ptr();
    a.x_stride = x_.stride;
    a.out = out_.dev.ptr();
    a.out_stride = out_.stride;
    a.weight = w_buf_.ptr();
    a.weight_dtype = spec_.weight;
    if (spec_.residual) {
      a.residual = r_.dev.ptr();
      a.residual_stride = r_.stride;
      const RowBuffer& sum = opt_.sum_in_place ? r_ : sum_;
      if (opt_.write_sum) {
        a.sum_out = sum.dev.ptr();
        a.sum_out_stride = sum.stride;
      }
    }
    if (spec_.gate) {
      a.gate = z_.dev.ptr();
      a.gate_stride = z_.stride;
    }
    a.rows = spec_.rows;
    a.cols = spec_.cols;
    a.kind = spec_.kind;
    a.eps = opt_.eps;
    return LaunchRmsNorm(variant, a, stream);
  }

  Status Check(CUstream stream) override {
    DFLASH_ASSIGN_OR_RETURN(const gpu::DriverApi* api, gpu::Driver());
    DFLASH_RETURN_IF_ERROR(gpu::CheckCu(api->StreamSynchronize(stream), "cuStreamSynchronize", "rmsnorm check"));
    std::ostringstream m;
    DFLASH_ASSIGN_OR_RETURN(const bool out_ok, CheckOut(m));
    bool sum_ok = true;
    if (spec_.residual && opt_.write_sum) {
      DFLASH_ASSIGN_OR_RETURN(sum_ok, CheckSum(opt_.sum_in_place ? r_ : sum_, m));
    }
    if (out_ok && sum_ok) return Status::Ok();
    return Status(ErrorCode::kMismatch, "rmsnorm " + ToJson(spec_).dump() + ": " + m.str());
  }

  std::size_t BytesTouched() const override {
    const std::size_t rc = static_cast<std::size_t>(spec_.rows * spec_.cols);
    const std::size_t tensors = 2 + (spec_.residual ? 1 : 0) + (spec_.gate ? 1 : 0) +
                                (spec_.residual && opt_.write_sum ? 1 : 0);
    return rc * 2 * tensors + w16_.size() * 2 + w32_.size() * 4;
  }

 private:
  void Shape(RowBuffer& t, std::int64_t pad) { t.Shape(spec_.rows, spec_.cols, pad); }

  // Downloads `t` and counts the elements outside its rows' first cols that are no longer as uploaded.
  Result<std::vector<std::uint16_t>> Download(const RowBuffer& t, std::int64_t& clobbered) const {
    std::vector<std::uint16_t> got(t.host.size());
    DFLASH_RETURN_IF_ERROR(t.dev.Download(got.data(), t.bytes()));
    clobbered = 0;
    for (std::int64_t i = 0; i < spec_.rows; ++i)
      for (std::int64_t c = spec_.cols; c < t.stride; ++c)
        clobbered += got[static_cast<std::size_t>(i * t.stride + c)] != kRowPoison;
    return got;
  }

  Result<bool> CheckOut(std::ostringstream& m) const {
    std::int64_t clobbered = 0;
    DFLASH_ASSIGN_OR_RETURN(const std::vector<std::uint16_t> y, Download(out_, clobbered));
    std::int64_t bad = 0, worst_i = -1, worst_c = -1;
    double worst_excess = -1.0, worst_got = 0.0, worst_want = 0.0, max_ulps = 0.0;
    for (std::int64_t i = 0; i < spec_.rows; ++i) {
      for (std::int64_t c = 0; c < spec_.cols; ++c) {
        const double got = Bf16ToFloat(y[static_cast<std::size_t>(i * out_.stride + c)]);
        const double want = ref_.out[static_cast<std::size_t>(i * spec_.cols + c)];
        const double err = std::isnan(got) ? INFINITY : std::fabs(got - want);
        const double ulp = Bf16Ulp(want);
        const double tol = ulp + kAbsTol;
        max_ulps = std::max(max_ulps, err / ulp);
        if (!(err <= tol)) {
          ++bad;
          if (err - tol > worst_excess) {
            worst_excess = err - tol;
            worst_i = i;
            worst_c = c;
            worst_got = got;
            worst_want = want;
          }
        }
      }
    }
    if (bad == 0 && clobbered == 0) return true;
    m << bad << " of " << spec_.rows * spec_.cols << " outputs outside |err| <= ulp(ref) + " << kAbsTol;
    if (bad > 0)
      m << " (worst at row " << worst_i << " col " << worst_c << ": got " << worst_got << ", want " << worst_want
        << ")";
    m << "; max error " << max_ulps << " ulp";
    if (clobbered > 0) m << "; " << clobbered << " elements between out's rows were written";
    m << ". ";
    return false;
  }

  Result<bool> CheckSum(const RowBuffer& t, std::ostringstream& m) const {
    std::int64_t clobbered = 0;
    DFLASH_ASSIGN_OR_RETURN(const std::vector<std::uint16_t> s, Download(t, clobbered));
    std::int64_t bad = 0, first_i = -1, first_c = -1;
    for (std::int64_t i = 0; i < spec_.rows; ++i) {
      for (std::int64_t c = 0; c < spec_.cols; ++c) {
        if (s[static_cast<std::size_t>(i * t.stride + c)] == ref_.sum[static_cast<std::size_t>(i * spec_.cols + c)])
          continue;
        if (bad++ == 0) {
          first_i = i;
          first_c = c;
        }
      }
    }
    if (bad == 0 && clobbered == 0) return true;
    m << "sum_out" << (opt_.sum_in_place ? " (in place over the residual)" : "") << ": " << bad << " of "
      << spec_.rows * spec_.cols << " elements differ from bf16(x + residual)";
    if (bad > 0) {
      const std::size_t at = static_cast<std::size_t>(first_i * t.stride + first_c);
      m << " (first at row " << first_i << " col " << first_c << ": got " << Bf16ToFloat(s[at]) << ", want "
        << Bf16ToFloat(ref_.sum[static_cast<std::size_t>(first_i * spec_.cols + first_c)]) << ")";
    }
    if (clobbered > 0) m << "; " << clobbered << " elements between its rows were written";
    m << ". ";
    return false;
  }

  ProblemSpec spec_;
  WorkloadOptions opt_;
  RowBuffer x_, r_, z_, sum_, out_;
  std::vector<std::uint16_t> w16_;
  std::vector<float> w32_;
  ReferenceOutput ref_;
  gpu::DeviceBuffer w_buf_, r_pristine_;
};

}  // namespace

Result<std::unique_ptr<tuner::Workload>> MakeRmsNormWorkload(const gpu::Context& ctx, const ProblemSpec& spec,
                                                             std::uint64_t seed, const WorkloadOptions& options) {
  for (std::int64_t pad : {options.x_pad, options.residual_pad, options.gate_pad, options.sum_out_pad,
                           options.out_pad}) {
    if (pad < 0 || pad % kColsMultiple != 0)
      return InvalidArgument("rmsnorm workload: row pads must be >= 0 and multiples of 8 (got " +
                             std::to_string(pad) + ")");
  }
  if (options.sum_in_place && !(spec.residual && options.write_sum))
    return InvalidArgument("rmsnorm workload: sum_in_place needs a residual problem with write_sum");
  DFLASH_RETURN_IF_ERROR(ctx.MakeCurrent());
  auto w = std::make_unique<RmsNormWorkload>(spec, options);
  DFLASH_RETURN_IF_ERROR(w->Init(seed));
  return std::unique_ptr<tuner::Workload>(std::move(w));
}

}  // namespace dflash::rmsnorm
