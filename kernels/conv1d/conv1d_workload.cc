#include "kernels/conv1d/conv1d_workload.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/conv1d/conv1d_api.h"
#include "kernels/conv1d/reference.h"

namespace dflash::conv1d {
namespace {

constexpr std::uint16_t kPoison = 0xFFFF;  // a NaN in bf16

class Conv1dWorkload final : public tuner::Workload {
 public:
  Conv1dWorkload(const ProblemSpec& spec, const WorkloadOptions& opt) : spec_(spec), opt_(opt) {}

  Status Init(std::uint64_t seed) {
    const std::int64_t T = spec_.tokens, C = spec_.channels;
    const bool tm = spec_.layout == Layout::kTokenMajor;
    const std::int64_t row_len = (tm ? C : T) + opt_.row_pad;
    const std::int64_t rows = tm ? T : C;
    stride_t_ = tm ? row_len : 1;
    stride_c_ = tm ? 1 : row_len;
    x_elems_ = static_cast<std::size_t>(opt_.x_offset + rows * row_len);
    y_elems_ = static_cast<std::size_t>(opt_.y_offset + rows * row_len);

    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
    x_.assign(x_elems_, kPoison);  // gaps hold NaN: a kernel reading them would fail the check
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t c = 0; c < C; ++c) x_[XIndex(t, c)] = FloatToBf16(normal(rng));
    w_.resize(static_cast<std::size_t>(C * 4));
    for (auto& v : w_) v = FloatToBf16(uniform(rng));
    if (opt_.bias) {
      b_.resize(static_cast<std::size_t>(C));
      for (auto& v : b_) v = FloatToBf16(uniform(rng));
    }
    if (spec_.num_seqs > 1) cu_ = RandomCuSeqlens(T, spec_.num_seqs, opt_.allow_empty_seqs, rng());

    ReferenceInput in;
    in.x = std::span<const std::uint16_t>(x_).subspan(static_cast<std::size_t>(opt_.x_offset));
    in.weight = w_;
    in.bias = b_;
    in.cu_seqlens = cu_;
    in.tokens = T;
    in.channels = C;
    in.x_stride_t = stride_t_;
    in.x_stride_c = stride_c_;
    ref_ = ReferenceConv1d(in);

    DFLASH_ASSIGN_OR_RETURN(x_buf_, gpu::DeviceBuffer::Alloc(x_elems_ * 2, "conv1d x"));
    DFLASH_ASSIGN_OR_RETURN(y_buf_, gpu::DeviceBuffer::Alloc(y_elems_ * 2, "conv1d y"));
    DFLASH_ASSIGN_OR_RETURN(w_buf_, gpu::DeviceBuffer::Alloc(w_.size() * 2, "conv1d weight"));
    DFLASH_RETURN_IF_ERROR(x_buf_.Upload(x_.data(), x_elems_ * 2));
    DFLASH_RETURN_IF_ERROR(w_buf_.Upload(w_.data(), w_.size() * 2));
    if (!b_.empty()) {
      DFLASH_ASSIGN_OR_RETURN(b_buf_, gpu::DeviceBuffer::Alloc(b_.size() * 2, "conv1d bias"));
      DFLASH_RETURN_IF_ERROR(b_buf_.Upload(b_.data(), b_.size() * 2));
    }
    if (!cu_.empty()) {
      DFLASH_ASSIGN_OR_RETURN(cu_buf_, gpu::DeviceBuffer::Alloc(cu_.size() * 4, "conv1d cu_seqlens"));
      DFLASH_RETURN_IF_ERROR(cu_buf_.Upload(cu_.data(), cu_.size() * 4));
    }
    return Status::Ok();
  }

  Status PoisonOutputs(CUstream stream) override { return y_buf_.Fill(0xFF, stream); }

  Status Launch(const tuner::LoadedVariant& variant, CUstream stream) override {
    Conv1dArgs a;
    a.x = x_buf_.ptr() + static_cast<CUdeviceptr>(opt_.x_offset * 2);
    a.y = y_buf_.ptr() + static_cast<CUdeviceptr>(opt_.y_offset * 2);
    a.weight = w_buf_.ptr();
    a.bias = b_.empty() ? 0 : b_buf_.ptr();
    a.cu_seqlens = cu_.empty() ? 0 : cu_buf_.ptr();
    a.tokens = spec_.tokens;
    a.channels = spec_.channels;
    a.num_seqs = cu_.empty() ? 1 : spec_.num_seqs;
    a.x_stride_t = a.y_stride_t = stride_t_;
    a.x_stride_c = a.y_stride_c = stride_c_;
    return LaunchConv1d(variant, a, stream);
  }

  Status Check(CUstream stream) override {
    DFLASH_ASSIGN_OR_RETURN(const gpu::DriverApi* api, gpu::Driver());
    DFLASH_RETURN_IF_ERROR(gpu::CheckCu(api->StreamSynchronize(stream), "cuStreamSynchronize", "conv1d check"));
    std::vector<std::uint16_t> y(y_elems_);
    DFLASH_RETURN_IF_ERROR(y_buf_.Download(y.data(), y_elems_ * 2));

    const std::int64_t T = spec_.tokens, C = spec_.channels;
    std::vector<bool> inside(y_elems_, false);
    std::int64_t bad = 0, worst_t = -1, worst_c = -1;
    double max_abs = 0.0, max_rel = 0.0, worst_excess = -1.0, worst_got = 0.0, worst_want = 0.0;
    for (std::int64_t t = 0; t < T; ++t) {
      for (std::int64_t c = 0; c < C; ++c) {
        const std::size_t i = static_cast<std::size_t>(opt_.y_offset + t * stride_t_ + c * stride_c_);
        inside[i] = true;
        const double got = Bf16ToDouble(y[i]);
        const double want = ref_[static_cast<std::size_t>(t * C + c)];
        const double err = std::isnan(got) ? INFINITY : std::fabs(got - want);
        const double tol = kAbsTol + kRelTol * std::fabs(want);
        max_abs = std::max(max_abs, err);
        if (want != 0.0) max_rel = std::max(max_rel, err / std::fabs(want));
        if (!(err <= tol)) {
          ++bad;
          if (err - tol > worst_excess) {
            worst_excess = err - tol;
            worst_t = t;
            worst_c = c;
            worst_got = got;
            worst_want = want;
          }
        }
      }
    }
    std::int64_t clobbered = 0;
    for (std::size_t i = 0; i < y_elems_; ++i)
      if (!inside[i] && y[i] != kPoison) ++clobbered;
    if (bad == 0 && clobbered == 0) return Status::Ok();
    std::ostringstream m;
    m << "conv1d " << LayoutName(spec_.layout) << " tokens=" << T << " channels=" << C
      << " num_seqs=" << spec_.num_seqs << ": " << bad << " of " << T * C
      << " outputs outside |err| <= " << kAbsTol << " + " << kRelTol << "*|ref|";
    if (bad > 0)
      m << " (worst at t=" << worst_t << " c=" << worst_c << ": got " << worst_got << ", want " << worst_want
        << ")";
    m << "; max abs err " << max_abs << ", max rel err " << max_rel;
    if (clobbered > 0) m << "; " << clobbered << " elements outside the output were written";
    return Status(ErrorCode::kMismatch, m.str());
  }

  std::size_t BytesTouched() const override {
    const std::size_t tc = static_cast<std::size_t>(spec_.tokens * spec_.channels);
    return tc * 2 * 2 + w_.size() * 2 + b_.size() * 2 + cu_.size() * 4;
  }

 private:
  std::size_t XIndex(std::int64_t t, std::int64_t c) const {
    return static_cast<std::size_t>(opt_.x_offset + t * stride_t_ + c * stride_c_);
  }

  ProblemSpec spec_;
  WorkloadOptions opt_;
  std::int64_t stride_t_ = 0, stride_c_ = 0;
  std::size_t x_elems_ = 0, y_elems_ = 0;
  std::vector<std::uint16_t> x_, w_, b_;
  std::vector<std::int32_t> cu_;
  std::vector<double> ref_;
  gpu::DeviceBuffer x_buf_, y_buf_, w_buf_, b_buf_, cu_buf_;
};

}  // namespace

std::vector<std::int32_t> RandomCuSeqlens(std::int64_t tokens, std::int64_t num_seqs, bool allow_empty,
                                          std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> cuts;
  const std::int64_t k = num_seqs - 1;
  if (allow_empty) {
    std::uniform_int_distribution<std::int64_t> pick(0, tokens);
    for (std::int64_t i = 0; i < k; ++i) cuts.push_back(static_cast<std::int32_t>(pick(rng)));
  } else if (k > 0) {
    // k distinct cut points in [1, tokens - 1]: every sequence non-empty.
    const std::int64_t n = tokens - 1;
    if (2 * k > n) {
      std::vector<std::int32_t> all(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) all[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i + 1);
      std::shuffle(all.begin(), all.end(), rng);
      cuts.assign(all.begin(), all.begin() + k);
    } else {
      std::set<std::int32_t> chosen;
      std::uniform_int_distribution<std::int64_t> pick(1, n);
      while (static_cast<std::int64_t>(chosen.size()) < k) chosen.insert(static_cast<std::int32_t>(pick(rng)));
      cuts.assign(chosen.begin(), chosen.end());
    }
  }
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::int32_t> cu;
  cu.reserve(static_cast<std::size_t>(num_seqs + 1));
  cu.push_back(0);
  cu.insert(cu.end(), cuts.begin(), cuts.end());
  cu.push_back(static_cast<std::int32_t>(tokens));
  return cu;
}

Result<std::unique_ptr<tuner::Workload>> MakeConv1dWorkload(const gpu::Context& ctx, const ProblemSpec& spec,
                                                            std::uint64_t seed, const WorkloadOptions& options) {
  if (options.row_pad < 0 || options.x_offset < 0 || options.y_offset < 0)
    return InvalidArgument("conv1d workload: row_pad and offsets must be >= 0");
  if (!options.allow_empty_seqs && spec.num_seqs > spec.tokens)
    return InvalidArgument("conv1d workload: num_seqs=" + std::to_string(spec.num_seqs) + " > tokens=" +
                           std::to_string(spec.tokens) + " needs allow_empty_seqs");
  DFLASH_RETURN_IF_ERROR(ctx.MakeCurrent());
  auto w = std::make_unique<Conv1dWorkload>(spec, options);
  DFLASH_RETURN_IF_ERROR(w->Init(seed));
  return std::unique_ptr<tuner::Workload>(std::move(w));
}

}  // namespace dflash::conv1d
