#include "kernels/rmsnorm/rmsnorm_bwd_workload.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/rmsnorm/reference.h"
#include "kernels/rmsnorm/row_buffer.h"
#include "kernels/rmsnorm/rmsnorm_bwd_api.h"
#include "kernels/rmsnorm/rmsnorm_workload.h"

namespace dflash::rmsnorm {
namespace {

class RmsNormBwdWorkload final : public tuner::Workload {
 public:
  RmsNormBwdWorkload(const BwdProblemSpec& spec, const BwdWorkloadOptions& opt) : spec_(spec), opt_(opt) {}

  Status Init(std::uint64_t seed) {
    const std::int64_t R = spec_.rows, C = spec_.cols;
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-6, 6);
    Shape(x_, opt_.x_pad);
    Shape(dy_, opt_.dy_pad);
    Shape(dx_, opt_.dx_pad);
    for (std::int64_t i = 0; i < R; ++i) {
      const float scale = std::ldexp(1.0f, exponent(rng));
      for (std::int64_t c = 0; c < C; ++c) {
        x_.at(i, c) = FloatToBf16(scale * normal(rng));
        dy_.at(i, c) = FloatToBf16(normal(rng));
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
    in.weight_bf16 = w16_;
    in.weight_fp32 = w32_;
    in.rows = R;
    in.cols = C;
    in.kind = spec_.kind;
    in.eps = opt_.eps;
    ref_ = ReferenceRmsNormBackward(in, dy_.host, dy_.stride);
    // The tolerance of every dx element, once: the tuner checks every variant, and the ulp per element is the slow
    // part of a check over tens of millions of elements.
    dx_tol_.resize(ref_.dx.size());
    for (std::int64_t i = 0; i < R; ++i) {
      const double row_tol = kBwdRelTol * ref_.dx_scale[static_cast<std::size_t>(i)];
      for (std::int64_t c = 0; c < C; ++c) {
        const std::size_t at = static_cast<std::size_t>(i * C + c);
        dx_tol_[at] = Bf16Ulp(ref_.dx[at]) + row_tol;
      }
    }

    for (RowBuffer* t : {&x_, &dy_, &dx_}) {
      DFLASH_ASSIGN_OR_RETURN(t->dev, gpu::DeviceBuffer::Alloc(t->bytes(), "rmsnorm_bwd tensor"));
      DFLASH_RETURN_IF_ERROR(t->dev.Upload(t->host.data(), t->bytes()));
    }
    const std::size_t w_bytes = w32_.empty() ? w16_.size() * 2 : w32_.size() * 4;
    DFLASH_ASSIGN_OR_RETURN(w_buf_, gpu::DeviceBuffer::Alloc(w_bytes, "rmsnorm_bwd weight"));
    DFLASH_RETURN_IF_ERROR(w_buf_.Upload(w32_.empty() ? static_cast<const void*>(w16_.data()) : w32_.data(), w_bytes));
    // Room for any config: at most one partial row per row plus one block's idle slots (1024 rows of 1 thread).
    partial_capacity_ = R + 1024;
    DFLASH_ASSIGN_OR_RETURN(partial_, gpu::DeviceBuffer::Alloc(static_cast<std::size_t>(partial_capacity_ * C) * 4,
                                                               "rmsnorm_bwd dw_partial"));
    return Status::Ok();
  }

  Status PoisonOutputs(CUstream stream) override {
    DFLASH_RETURN_IF_ERROR(dx_.dev.Fill(0xFF, stream));
    return partial_.Fill(0xFF, stream);
  }

  Status Launch(const tuner::LoadedVariant& variant, CUstream stream) override {
    DFLASH_ASSIGN_OR_RETURN(partial_rows_, DwPartialRows(variant, spec_.rows));
    if (partial_rows_ > partial_capacity_)
      return Internal("rmsnorm_bwd workload: " + std::to_string(partial_rows_) + " dw_partial rows > capacity " +
                      std::to_string(partial_capacity_));
    RmsNormBwdArgs a;
    a.x = x_.dev.ptr();
    a.x_stride = x_.stride;
    a.dy = dy_.dev.ptr();
    a.dy_stride = dy_.stride;
    a.dx = dx_.dev.ptr();
    a.dx_stride = dx_.stride;
    a.weight = w_buf_.ptr();
    a.weight_dtype = spec_.weight;
    a.dw_partial = partial_.ptr();
    a.rows = spec_.rows;
    a.cols = spec_.cols;
    a.kind = spec_.kind;
    a.eps = opt_.eps;
    return LaunchRmsNormBackward(variant, a, stream);
  }

  Status Check(CUstream stream) override {
    DFLASH_ASSIGN_OR_RETURN(const gpu::DriverApi* api, gpu::Driver());
    DFLASH_RETURN_IF_ERROR(gpu::CheckCu(api->StreamSynchronize(stream), "cuStreamSynchronize", "rmsnorm_bwd check"));
    std::ostringstream m;
    DFLASH_ASSIGN_OR_RETURN(const bool dx_ok, CheckDx(m));
    DFLASH_ASSIGN_OR_RETURN(const bool dw_ok, CheckDw(m));
    if (dx_ok && dw_ok) return Status::Ok();
    return Status(ErrorCode::kMismatch, "rmsnorm_bwd " + ToJson(spec_).dump() + ": " + m.str());
  }

  std::size_t BytesTouched() const override {
    // x, dy in, dx out, the weight; dw_partial's rows (a few per block) are left out: they depend on the config.
    return static_cast<std::size_t>(spec_.rows * spec_.cols) * 2 * 3 + w16_.size() * 2 + w32_.size() * 4;
  }

 private:
  void Shape(RowBuffer& t, std::int64_t pad) { t.Shape(spec_.rows, spec_.cols, pad); }

  Result<bool> CheckDx(std::ostringstream& m) const {
    std::vector<std::uint16_t> got(dx_.host.size());
    DFLASH_RETURN_IF_ERROR(dx_.dev.Download(got.data(), dx_.bytes()));
    std::int64_t bad = 0, clobbered = 0, worst_i = -1, worst_c = -1;
    double worst_excess = -1.0, worst_got = 0.0, worst_want = 0.0;
    for (std::int64_t i = 0; i < spec_.rows; ++i) {
      for (std::int64_t c = 0; c < dx_.stride; ++c) {
        const std::uint16_t bits = got[static_cast<std::size_t>(i * dx_.stride + c)];
        if (c >= spec_.cols) {
          clobbered += bits != kRowPoison;
          continue;
        }
        const double g = Bf16ToFloat(bits);
        const double want = ref_.dx[static_cast<std::size_t>(i * spec_.cols + c)];
        const double err = std::isnan(g) ? INFINITY : std::fabs(g - want);
        const double tol = dx_tol_[static_cast<std::size_t>(i * spec_.cols + c)];
        if (!(err <= tol)) {
          ++bad;
          if (err - tol > worst_excess) {
            worst_excess = err - tol;
            worst_i = i;
            worst_c = c;
            worst_got = g;
            worst_want = want;
          }
        }
      }
    }
    if (bad == 0 && clobbered == 0) return true;
    m << bad << " of " << spec_.rows * spec_.cols << " dx elements outside ulp(ref) + " << kBwdRelTol
      << " * the row's term magnitude";
    if (bad > 0)
      m << " (worst at row " << worst_i << " col " << worst_c << ": got " << worst_got << ", want " << worst_want
        << ")";
    if (clobbered > 0) m << "; " << clobbered << " elements between dx's rows were written";
    m << ". ";
    return false;
  }

  Result<bool> CheckDw(std::ostringstream& m) const {
    const std::int64_t C = spec_.cols;
    std::vector<float> partial(static_cast<std::size_t>(partial_rows_ * C));
    if (!partial.empty()) DFLASH_RETURN_IF_ERROR(partial_.Download(partial.data(), partial.size() * 4));
    std::int64_t bad = 0, worst_c = -1;
    double worst_excess = -1.0, worst_got = 0.0;
    for (std::int64_t c = 0; c < C; ++c) {
      double sum = 0.0;
      for (std::int64_t r = 0; r < partial_rows_; ++r) sum += partial[static_cast<std::size_t>(r * C + c)];
      const double want = ref_.dw[static_cast<std::size_t>(c)];
      const double err = std::isnan(sum) ? INFINITY : std::fabs(sum - want);
      const double tol = kBwdRelTol * ref_.dw_abs[static_cast<std::size_t>(c)] + 1e-30;
      if (!(err <= tol)) {
        ++bad;
        if (err - tol > worst_excess) {
          worst_excess = err - tol;
          worst_c = c;
          worst_got = sum;
        }
      }
    }
    if (bad == 0) return true;
    m << bad << " of " << C << " dw columns (sums of " << partial_rows_ << " dw_partial rows) outside " << kBwdRelTol
      << " * sum |dy * n| (worst col " << worst_c << ": got " << worst_got << ", want "
      << ref_.dw[static_cast<std::size_t>(worst_c)] << "). ";
    return false;
  }

  BwdProblemSpec spec_;
  BwdWorkloadOptions opt_;
  RowBuffer x_, dy_, dx_;
  std::vector<std::uint16_t> w16_;
  std::vector<float> w32_;
  ReferenceGradients ref_;
  std::vector<double> dx_tol_;  // [rows, cols]: ulp(ref) + kBwdRelTol * the row's term magnitude
  gpu::DeviceBuffer w_buf_, partial_;
  std::int64_t partial_capacity_ = 0, partial_rows_ = 0;
};

}  // namespace

Result<std::unique_ptr<tuner::Workload>> MakeRmsNormBwdWorkload(const gpu::Context& ctx, const BwdProblemSpec& spec,
                                                                std::uint64_t seed,
                                                                const BwdWorkloadOptions& options) {
  for (std::int64_t pad : {options.x_pad, options.dy_pad, options.dx_pad}) {
    if (pad < 0 || pad % kColsMultiple != 0)
      return InvalidArgument("rmsnorm_bwd workload: row pads must be >= 0 and multiples of 8 (got " +
                             std::to_string(pad) + ")");
  }
  DFLASH_RETURN_IF_ERROR(ctx.MakeCurrent());
  auto w = std::make_unique<RmsNormBwdWorkload>(spec, options);
  DFLASH_RETURN_IF_ERROR(w->Init(seed));
  return std::unique_ptr<tuner::Workload>(std::move(w));
}

}  // namespace dflash::rmsnorm
