#include "kernels/swiglu/swiglu_workload.h"

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/swiglu/reference.h"
#include "kernels/swiglu/swiglu_api.h"

namespace dflash::swiglu {
namespace {

constexpr std::uint16_t kPoison = 0xFFFF;  // a NaN in bf16

class SwigluWorkload final : public tuner::Workload {
 public:
  SwigluWorkload(const ProblemSpec& spec, const WorkloadOptions& opt) : spec_(spec), opt_(opt) {}

  Status Init(std::uint64_t seed) {
    const std::int64_t R = spec_.rows, C = spec_.cols;
    gate_stride_ = C + opt_.gate_pad;
    up_stride_ = C + opt_.up_pad;
    gate_.assign(static_cast<std::size_t>(R * gate_stride_), kPoison);
    up_.assign(static_cast<std::size_t>(R * up_stride_), kPoison);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-6, 6);
    for (std::int64_t r = 0; r < R; ++r) {
      const float scale = std::ldexp(1.0f, exponent(rng));
      for (std::int64_t c = 0; c < C; ++c) {
        gate_[static_cast<std::size_t>(r * gate_stride_ + c)] = FloatToBf16(3.0f * normal(rng));
        up_[static_cast<std::size_t>(r * up_stride_ + c)] = FloatToBf16(scale * normal(rng));
      }
    }
    ref_ = ReferenceSwiglu({gate_, up_, gate_stride_, up_stride_, R, C});
    DFLASH_ASSIGN_OR_RETURN(gate_dev_, gpu::DeviceBuffer::Alloc(gate_.size() * 2, "swiglu gate"));
    DFLASH_RETURN_IF_ERROR(gate_dev_.Upload(gate_.data(), gate_.size() * 2));
    DFLASH_ASSIGN_OR_RETURN(up_dev_, gpu::DeviceBuffer::Alloc(up_.size() * 2, "swiglu up"));
    DFLASH_RETURN_IF_ERROR(up_dev_.Upload(up_.data(), up_.size() * 2));
    DFLASH_ASSIGN_OR_RETURN(out_dev_, gpu::DeviceBuffer::Alloc(ref_.out.size() * 2, "swiglu out"));
    return Status::Ok();
  }

  Status PoisonOutputs(CUstream stream) override { return out_dev_.Fill(0xFF, stream); }

  Status Launch(const tuner::LoadedVariant& variant, CUstream stream) override {
    SwigluArgs a;
    a.gate = gate_dev_.ptr(), a.up = up_dev_.ptr(), a.out = out_dev_.ptr();
    a.gate_stride = gate_stride_, a.up_stride = up_stride_;
    a.rows = spec_.rows, a.cols = spec_.cols;
    return LaunchSwiglu(variant, a, stream);
  }

  Status Check(CUstream stream) override {
    DFLASH_ASSIGN_OR_RETURN(const gpu::DriverApi* api, gpu::Driver());
    DFLASH_RETURN_IF_ERROR(gpu::CheckCu(api->StreamSynchronize(stream), "cuStreamSynchronize", "swiglu check"));
    std::vector<std::uint16_t> got(ref_.out.size());
    DFLASH_RETURN_IF_ERROR(out_dev_.Download(got.data(), got.size() * 2));
    std::int64_t bad = 0, first = -1;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double g = Bf16ToFloat(got[i]);
      if (!std::isnan(g) && std::fabs(g - ref_.out[i]) <= ref_.tol[i]) continue;
      if (bad++ == 0) first = static_cast<std::int64_t>(i);
    }
    if (bad == 0) return Status::Ok();
    std::ostringstream m;
    m << "swiglu " << ToJson(spec_).dump() << ": " << bad << " of " << got.size() << " outputs wrong (first at row "
      << first / spec_.cols << " col " << first % spec_.cols << ": got " << Bf16ToFloat(got[first]) << ", want "
      << ref_.out[first] << ")";
    return Status(ErrorCode::kMismatch, m.str());
  }

  std::size_t BytesTouched() const override { return ref_.out.size() * 2 * 3; }

 private:
  ProblemSpec spec_;
  WorkloadOptions opt_;
  std::int64_t gate_stride_ = 0, up_stride_ = 0;
  std::vector<std::uint16_t> gate_, up_;
  ReferenceOutput ref_;
  gpu::DeviceBuffer gate_dev_, up_dev_, out_dev_;
};

}  // namespace

Result<std::unique_ptr<tuner::Workload>> MakeSwigluWorkload(const gpu::Context& ctx, const ProblemSpec& spec,
                                                            std::uint64_t seed, const WorkloadOptions& options) {
  if (options.gate_pad < 0 || options.gate_pad % 8 != 0 || options.up_pad < 0 || options.up_pad % 8 != 0)
    return InvalidArgument("swiglu workload: gate_pad and up_pad must be >= 0 multiples of 8");
  DFLASH_RETURN_IF_ERROR(ctx.MakeCurrent());
  auto w = std::make_unique<SwigluWorkload>(spec, options);
  DFLASH_RETURN_IF_ERROR(w->Init(seed));
  return std::unique_ptr<tuner::Workload>(std::move(w));
}

}  // namespace dflash::swiglu
