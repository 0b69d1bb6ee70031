#include "kernels/rope/rope_workload.h"

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/rope/reference.h"
#include "kernels/rope/rope_api.h"

namespace dflash::rope {
namespace {

constexpr std::uint16_t kPoison = 0xFFFF;  // a NaN in bf16

class RopeWorkload final : public tuner::Workload {
 public:
  RopeWorkload(const ProblemSpec& spec, const WorkloadOptions& opt) : spec_(spec), opt_(opt) {}

  Status Init(std::uint64_t seed) {
    const std::int64_t T = spec_.tokens, H = spec_.heads, D = spec_.head_dim, R = spec_.rotary_dim;
    head_stride_ = D + opt_.head_pad;
    token_stride_ = H * head_stride_ + opt_.token_pad;
    x_.assign(static_cast<std::size_t>(T * token_stride_), kPoison);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-6, 6);
    std::uniform_int_distribution<int> position(0, (1 << 17) - 1);
    for (std::int64_t t = 0; t < T; ++t) {
      const float scale = std::ldexp(1.0f, exponent(rng));
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t i = 0; i < D; ++i)
          x_[static_cast<std::size_t>(t * token_stride_ + h * head_stride_ + i)] = FloatToBf16(scale * normal(rng));
    }
    cos_.resize(static_cast<std::size_t>(T * R));
    sin_.resize(cos_.size());
    for (std::int64_t t = 0; t < T; ++t) {
      const float pos = static_cast<float>(position(rng));
      for (std::int64_t i = 0; i < R; ++i) {
        const float inv_freq =
            static_cast<float>(std::pow(1e6, -static_cast<double>(2 * (i % (R / 2))) / static_cast<double>(R)));
        const float f = pos * inv_freq;
        cos_[static_cast<std::size_t>(t * R + i)] = std::cos(f);
        sin_[static_cast<std::size_t>(t * R + i)] = std::sin(f);
      }
    }
    ReferenceInput in;
    in.x = x_;
    in.cos = cos_;
    in.sin = sin_;
    in.token_stride = token_stride_;
    in.head_stride = head_stride_;
    in.tokens = T, in.heads = H, in.head_dim = D, in.rotary_dim = R;
    in.sign = opt_.sign;
    ref_ = ReferenceRope(in);
    // The tolerance of every output, once (the tuner checks every variant; the ulp is the slow part of a check).
    tol_.resize(ref_.size());
    for (std::int64_t th = 0; th < T * H; ++th) {
      const std::uint16_t* xh = x_.data() + (th / H) * token_stride_ + (th % H) * head_stride_;
      for (std::int64_t i = 0; i < R; ++i) {
        const std::size_t at = static_cast<std::size_t>(th * D + i);
        const double partner = Bf16ToFloat(xh[i < R / 2 ? i + R / 2 : i - R / 2]);
        tol_[at] = Bf16Ulp(ref_[at]) + kRopeRelTol * (std::fabs(Bf16ToFloat(xh[i])) + std::fabs(partner));
      }
    }

    DFLASH_ASSIGN_OR_RETURN(x_dev_, gpu::DeviceBuffer::Alloc(std::max<std::size_t>(16, x_.size() * 2), "rope x"));
    if (!x_.empty()) DFLASH_RETURN_IF_ERROR(x_dev_.Upload(x_.data(), x_.size() * 2));
    DFLASH_ASSIGN_OR_RETURN(cos_dev_, gpu::DeviceBuffer::Alloc(std::max<std::size_t>(16, cos_.size() * 4), "rope cos"));
    DFLASH_ASSIGN_OR_RETURN(sin_dev_, gpu::DeviceBuffer::Alloc(std::max<std::size_t>(16, sin_.size() * 4), "rope sin"));
    if (!cos_.empty()) {
      DFLASH_RETURN_IF_ERROR(cos_dev_.Upload(cos_.data(), cos_.size() * 4));
      DFLASH_RETURN_IF_ERROR(sin_dev_.Upload(sin_.data(), sin_.size() * 4));
    }
    DFLASH_ASSIGN_OR_RETURN(out_dev_, gpu::DeviceBuffer::Alloc(std::max<std::size_t>(16, OutElems() * 2), "rope out"));
    return Status::Ok();
  }

  Status PoisonOutputs(CUstream stream) override { return out_dev_.Fill(0xFF, stream); }

  Status Launch(const tuner::LoadedVariant& variant, CUstream stream) override {
    RopeArgs a;
    a.x = x_dev_.ptr();
    a.cos = cos_dev_.ptr();
    a.sin = sin_dev_.ptr();
    a.out = out_dev_.ptr();
    a.x_token_stride = token_stride_;
    a.x_head_stride = head_stride_;
    a.tokens = spec_.tokens, a.heads = spec_.heads, a.head_dim = spec_.head_dim, a.rotary_dim = spec_.rotary_dim;
    a.sign = opt_.sign;
    return LaunchRope(variant, a, stream);
  }

  Status Check(CUstream stream) override {
    DFLASH_ASSIGN_OR_RETURN(const gpu::DriverApi* api, gpu::Driver());
    DFLASH_RETURN_IF_ERROR(gpu::CheckCu(api->StreamSynchronize(stream), "cuStreamSynchronize", "rope check"));
    std::vector<std::uint16_t> got(OutElems());
    if (!got.empty()) DFLASH_RETURN_IF_ERROR(out_dev_.Download(got.data(), got.size() * 2));
    const std::int64_t D = spec_.head_dim, R = spec_.rotary_dim;
    std::int64_t bad = 0, first = -1;
    double first_got = 0.0, first_want = 0.0;
    for (std::int64_t th = 0; th < spec_.tokens * spec_.heads; ++th) {
      const std::int64_t t = th / spec_.heads, h = th % spec_.heads;
      const std::uint16_t* x = x_.data() + t * token_stride_ + h * head_stride_;
      for (std::int64_t i = 0; i < D; ++i) {
        const std::size_t at = static_cast<std::size_t>(th * D + i);
        bool ok;
        if (i >= R) {
          ok = got[at] == x[i];
        } else {
          const double g = Bf16ToFloat(got[at]);
          ok = !std::isnan(g) && std::fabs(g - ref_[at]) <= tol_[at];
        }
        if (!ok && bad++ == 0) {
          first = static_cast<std::int64_t>(at);
          first_got = Bf16ToFloat(got[at]);
          first_want = ref_[at];
        }
      }
    }
    if (bad == 0) return Status::Ok();
    std::ostringstream m;
    m << "rope " << ToJson(spec_).dump() << " sign " << opt_.sign << ": " << bad << " of " << OutElems()
      << " outputs wrong (first at token " << first / D / spec_.heads << " head " << first / D % spec_.heads
      << " dim " << first % D << ": got " << first_got << ", want " << first_want << ")";
    return Status(ErrorCode::kMismatch, m.str());
  }

  std::size_t BytesTouched() const override {
    return OutElems() * 2 * 2 + cos_.size() * 4 * 2;  // x in, out, the two tables
  }

 private:
  std::size_t OutElems() const { return static_cast<std::size_t>(spec_.tokens * spec_.heads * spec_.head_dim); }

  ProblemSpec spec_;
  WorkloadOptions opt_;
  std::int64_t head_stride_ = 0, token_stride_ = 0;
  std::vector<std::uint16_t> x_;
  std::vector<float> cos_, sin_;
  std::vector<double> ref_;
  std::vector<double> tol_;  // per output of the rotated part (the tail is compared bit for bit)
  gpu::DeviceBuffer x_dev_, cos_dev_, sin_dev_, out_dev_;
};

}  // namespace

Result<std::unique_ptr<tuner::Workload>> MakeRopeWorkload(const gpu::Context& ctx, const ProblemSpec& spec,
                                                          std::uint64_t seed, const WorkloadOptions& options) {
  if (options.head_pad < 0 || options.head_pad % 8 != 0 || options.token_pad < 0 || options.token_pad % 8 != 0)
    return InvalidArgument("rope workload: head_pad and token_pad must be >= 0 multiples of 8");
  if (options.sign != 1.0f && options.sign != -1.0f) return InvalidArgument("rope workload: sign must be +1 or -1");
  DFLASH_RETURN_IF_ERROR(ctx.MakeCurrent());
  auto w = std::make_unique<RopeWorkload>(spec, options);
  DFLASH_RETURN_IF_ERROR(w->Init(seed));
  return std::unique_ptr<tuner::Workload>(std::move(w));
}

}  // namespace dflash::rope
