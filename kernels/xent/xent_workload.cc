#include "kernels/xent/xent_workload.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <future>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/xent/reference.h"
#include "kernels/xent/xent_api.h"
#include "tuner/thread_pool.h"

namespace dflash::xent {
namespace {

constexpr std::uint16_t kGradPoison = 0xFFFF;  // a NaN in bf16
constexpr float kInf = std::numeric_limits<float>::infinity();

std::int64_t RoundUp4(std::int64_t v) { return (v + 3) / 4 * 4; }

// |got - want| within `tol`, NaN only for NaN, an infinity only for the same infinity.
bool Matches(double got, double want, double tol) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::fabs(got - want) <= tol;
}

// What the check found in a range of rows.
struct Findings {
  std::int64_t bad_loss = 0, bad_argmax = 0, bad_grad = 0, clobbered = 0;
  std::string first;  // the first mismatch, in words
  void Note(const std::string& what) {
    if (first.empty()) first = what;
  }
  void Add(const Findings& o) {
    bad_loss += o.bad_loss;
    bad_argmax += o.bad_argmax;
    bad_grad += o.bad_grad;
    clobbered += o.clobbered;
    if (first.empty()) first = o.first;
  }
};

// Runs fn(begin, end) over [0, rows) in chunks on a pool, returning the results in chunk order.
template <class Fn>
auto ForRowChunks(std::int64_t rows, Fn fn) -> std::vector<decltype(fn(std::int64_t{}, std::int64_t{}))> {
  tuner::ThreadPool pool;
  const std::int64_t chunks = std::min<std::int64_t>(rows, 4 * static_cast<std::int64_t>(pool.size()));
  std::vector<std::future<decltype(fn(std::int64_t{}, std::int64_t{}))>> futures;
  for (std::int64_t c = 0; c < chunks; ++c)
    futures.push_back(pool.Submit([c, chunks, rows, &fn] { return fn(c * rows / chunks, (c + 1) * rows / chunks); }));
  std::vector<decltype(fn(std::int64_t{}, std::int64_t{}))> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

class XentWorkload final : public tuner::Workload {
 public:
  XentWorkload(const ProblemSpec& spec, const WorkloadOptions& opt) : spec_(spec), opt_(opt) {}

  Status Init(std::uint64_t seed) {
    const std::int64_t R = spec_.rows, V = spec_.vocab;
    stride_ = RoundUp4(V) + opt_.row_pad;
    grad_stride_ = RoundUp4(V) + opt_.grad_row_pad;
    x_.assign(static_cast<std::size_t>(R * stride_), std::numeric_limits<float>::quiet_NaN());  // padding: NaN
    labels_.resize(static_cast<std::size_t>(R));
    weights_.resize(static_cast<std::size_t>(R));
    ForRowChunks(R, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = b; r < e; ++r) FillRow(r, seed);
      return 0;
    });
    if (opt_.special_rows && R >= 2 * kSpecialRowKinds && V >= 4) {
      for (int k = 0; k < kSpecialRowKinds; ++k) Plant((2 * k + 1) * R / (2 * kSpecialRowKinds), k, seed);
    }
    ref_.resize(static_cast<std::size_t>(R));
    ForRowChunks(R, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = b; r < e; ++r) ref_[r] = ReferenceXentRow(Row(r), labels_[r], weights_[r], opt_.grad_scale);
      return 0;
    });
    if (spec_.grad) {
      // Every candidate's gradient is compared with these (an exp per element, computed once, not per candidate).
      // Stored in fp32: rounding to float can only move a value up to a power of two, so the tolerance's ulp term
      // can only grow by that rounding, never shrink.
      want_grad_.resize(static_cast<std::size_t>(R * V));
      ForRowChunks(R, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t r = b; r < e; ++r) {
          const std::span<const float> x = Row(r);
          float* want = want_grad_.data() + r * V;
          for (std::int64_t v = 0; v < V; ++v) want[v] = static_cast<float>(ReferenceGrad(ref_[r], x[v], v));
        }
        return 0;
      });
      got_grad_.resize(static_cast<std::size_t>(R * grad_stride_));
    }

    DFLASH_ASSIGN_OR_RETURN(x_buf_, gpu::DeviceBuffer::Alloc(x_.size() * 4, "xent logits"));
    DFLASH_ASSIGN_OR_RETURN(labels_buf_, gpu::DeviceBuffer::Alloc(labels_.size() * 8, "xent labels"));
    DFLASH_ASSIGN_OR_RETURN(weights_buf_, gpu::DeviceBuffer::Alloc(weights_.size() * 4, "xent weights"));
    DFLASH_ASSIGN_OR_RETURN(loss_buf_, gpu::DeviceBuffer::Alloc(static_cast<std::size_t>(R) * 4, "xent loss"));
    DFLASH_ASSIGN_OR_RETURN(argmax_buf_, gpu::DeviceBuffer::Alloc(static_cast<std::size_t>(R) * 8, "xent argmax"));
    if (spec_.grad) {
      DFLASH_ASSIGN_OR_RETURN(grad_buf_,
                              gpu::DeviceBuffer::Alloc(static_cast<std::size_t>(R * grad_stride_) * 2, "xent grad"));
    }
    DFLASH_RETURN_IF_ERROR(x_buf_.Upload(x_.data(), x_.size() * 4));
    DFLASH_RETURN_IF_ERROR(labels_buf_.Upload(labels_.data(), labels_.size() * 8));
    DFLASH_RETURN_IF_ERROR(weights_buf_.Upload(weights_.data(), weights_.size() * 4));
    return Status::Ok();
  }

  Status PoisonOutputs(CUstream stream) override {
    DFLASH_RETURN_IF_ERROR(loss_buf_.Fill(0xFF, stream));    // NaN
    DFLASH_RETURN_IF_ERROR(argmax_buf_.Fill(0xFF, stream));  // -1
    if (spec_.grad) DFLASH_RETURN_IF_ERROR(grad_buf_.Fill(0xFF, stream));
    return Status::Ok();
  }

  Status Launch(const tuner::LoadedVariant& variant, CUstream stream) override {
    XentArgs a;
    a.logits = x_buf_.ptr();
    a.row_stride = stride_;
    a.labels = labels_buf_.ptr();
    a.weights = weights_buf_.ptr();
    a.loss = loss_buf_.ptr();
    a.argmax = argmax_buf_.ptr();
    a.grad = spec_.grad ? grad_buf_.ptr() : 0;
    a.grad_row_stride = spec_.grad ? grad_stride_ : 0;
    a.rows = spec_.rows;
    a.vocab = spec_.vocab;
    a.grad_scale = opt_.grad_scale;
    return LaunchXent(variant, a, stream);
  }

  Status Check(CUstream stream) override {
    DFLASH_ASSIGN_OR_RETURN(const gpu::DriverApi* api, gpu::Driver());
    DFLASH_RETURN_IF_ERROR(gpu::CheckCu(api->StreamSynchronize(stream), "cuStreamSynchronize", "xent check"));
    const std::int64_t R = spec_.rows;
    std::vector<float> loss(static_cast<std::size_t>(R));
    std::vector<std::int64_t> argmax(static_cast<std::size_t>(R));
    DFLASH_RETURN_IF_ERROR(loss_buf_.Download(loss.data(), loss.size() * 4));
    DFLASH_RETURN_IF_ERROR(argmax_buf_.Download(argmax.data(), argmax.size() * 8));
    if (spec_.grad) DFLASH_RETURN_IF_ERROR(grad_buf_.Download(got_grad_.data(), got_grad_.size() * 2));
    Findings all;
    for (const Findings& f : ForRowChunks(R, [&](std::int64_t b, std::int64_t e) {
           Findings found;
           for (std::int64_t r = b; r < e; ++r) CheckRow(r, loss[r], argmax[r], found);
           return found;
         }))
      all.Add(f);
    if (all.bad_loss + all.bad_argmax + all.bad_grad + all.clobbered == 0) return Status::Ok();
    std::ostringstream m;
    m << "xent rows=" << R << " vocab=" << spec_.vocab << " grad=" << (spec_.grad ? "true" : "false") << ": "
      << all.bad_loss << " losses, " << all.bad_argmax << " argmaxes, " << all.bad_grad << " gradient elements wrong, "
      << all.clobbered << " padding elements written; first: " << all.first;
    return Status(ErrorCode::kMismatch, m.str());
  }

  std::size_t BytesTouched() const override {
    const std::size_t rv = static_cast<std::size_t>(spec_.rows * spec_.vocab);
    return rv * 4 + (spec_.grad ? rv * 2 : 0) + static_cast<std::size_t>(spec_.rows) * (8 + 4 + 4 + 8);
  }

 private:
  std::span<const float> Row(std::int64_t r) const {
    return std::span<const float>(x_).subspan(static_cast<std::size_t>(r * stride_),
                                              static_cast<std::size_t>(spec_.vocab));
  }
  float* RowData(std::int64_t r) { return x_.data() + r * stride_; }
  static std::mt19937_64 RowRng(std::uint64_t seed, std::int64_t r, std::uint64_t salt) {
    const auto lo = [](std::uint64_t v) { return static_cast<std::uint32_t>(v); };
    const auto hi = [](std::uint64_t v) { return static_cast<std::uint32_t>(v >> 32); };
    std::seed_seq seq{lo(seed), hi(seed), lo(static_cast<std::uint64_t>(r)), hi(static_cast<std::uint64_t>(r)),
                      lo(salt)};
    return std::mt19937_64(seq);
  }

  void FillRow(std::int64_t r, std::uint64_t seed) {
    std::mt19937_64 rng = RowRng(seed, r, 0);
    std::normal_distribution<float> normal(0.0f, opt_.logit_std);
    float* x = RowData(r);
    for (std::int64_t v = 0; v < spec_.vocab; ++v) x[v] = normal(rng);
    labels_[r] = std::uniform_int_distribution<std::int64_t>(0, spec_.vocab - 1)(rng);
    weights_[r] = std::uniform_real_distribution<float>(0.25f, 2.0f)(rng);
  }

  // Row r becomes SpecialRow k (see the enum); a and b are two distinct positions, a < b.
  void Plant(std::int64_t r, int k, std::uint64_t seed) {
    std::mt19937_64 rng = RowRng(seed, r, 1);
    const std::int64_t V = spec_.vocab;
    std::int64_t a = std::uniform_int_distribution<std::int64_t>(0, V - 2)(rng);
    std::int64_t b = std::uniform_int_distribution<std::int64_t>(a + 1, V - 1)(rng);
    const std::int64_t other = (b + 1) % V;  // neither a nor b when V > 2 and b + 1 != a
    float* x = RowData(r);
    std::int64_t& label = labels_[r];
    switch (static_cast<SpecialRow>(k)) {
      case SpecialRow::kIgnoredLabel:
        label = kIgnoreIndex;
        break;
      case SpecialRow::kZeroWeight:
        weights_[r] = 0.0f;
        break;
      case SpecialRow::kZeroWeightNanInf:
        weights_[r] = 0.0f;
        x[a] = std::numeric_limits<float>::quiet_NaN();
        x[b] = kInf;
        break;
      case SpecialRow::kIgnoredWithNans:
        label = kIgnoreIndex;
        x[a] = x[b] = std::numeric_limits<float>::quiet_NaN();
        break;
      case SpecialRow::kTiedMax:
        x[a] = x[b] = 40.0f;
        break;
      case SpecialRow::kSomeNegInf:
        for (std::int64_t v = 0; v < V; v += 3) x[v] = -kInf;
        label = 1;
        break;
      case SpecialRow::kHugeLogit:
        x[a] = 1e4f;
        label = b;
        break;
      case SpecialRow::kHugeLogitIsLabel:
        x[a] = 1e4f;
        label = a;
        break;
      case SpecialRow::kAllNegInf:
        std::fill(x, x + V, -kInf);
        break;
      case SpecialRow::kPosInf:
        x[a] = kInf;
        label = other == a ? b : other;
        break;
      case SpecialRow::kLabelTooLarge:
        label = V;
        break;
      case SpecialRow::kLabelNegative:
        label = -5;
        break;
    }
  }

  // Row r of the candidate's outputs (its gradient: got_grad_, downloaded by Check).
  void CheckRow(std::int64_t r, float got_loss, std::int64_t got_argmax, Findings& found) const {
    const ReferenceRow& ref = ref_[r];
    const double w = weights_[r];
    const double loss_tol = kLossRelTol * std::fabs(ref.loss) + kLossLseUlps * 0x1p-24 * std::fabs(w * ref.lse);
    const bool loss_ok = ref.valid ? Matches(got_loss, ref.loss, loss_tol)
                                   : (got_loss == 0.0f && !std::signbit(got_loss));  // exactly +0
    if (!loss_ok) {
      ++found.bad_loss;
      found.Note("row " + std::to_string(r) + " loss " + std::to_string(got_loss) + ", want " +
                 std::to_string(ref.loss) + " (tolerance " + std::to_string(loss_tol) + ")");
    }
    if (got_argmax != ref.argmax) {
      ++found.bad_argmax;
      found.Note("row " + std::to_string(r) + " argmax " + std::to_string(got_argmax) + ", want " +
                 std::to_string(ref.argmax));
    }
    if (!spec_.grad) return;
    const std::uint16_t* g = got_grad_.data() + r * grad_stride_;
    const float* want_row = want_grad_.data() + r * spec_.vocab;
    const double abs_tol = kGradAbsTol * std::fabs(ref.coef) + 0x1p-133;
    const double label_tol = kLabelGradAbsTol * std::fabs(ref.coef);
    for (std::int64_t v = 0; v < spec_.vocab; ++v) {
      const double want = want_row[v];
      const double got = Bf16ToFloat(g[v]);
      const double tol = Bf16Ulp(want) + abs_tol + (v == ref.label ? label_tol : 0.0);
      const bool ok = ref.valid ? Matches(got, want, tol) : g[v] == 0;  // exactly +0
      if (!ok) {
        ++found.bad_grad;
        found.Note("row " + std::to_string(r) + " grad[" + std::to_string(v) + "] " + std::to_string(got) + ", want " +
                   std::to_string(want));
      }
    }
    for (std::int64_t v = spec_.vocab; v < grad_stride_; ++v)
      if (g[v] != kGradPoison) ++found.clobbered;
  }

  ProblemSpec spec_;
  WorkloadOptions opt_;
  std::int64_t stride_ = 0, grad_stride_ = 0;
  std::vector<float> x_;
  std::vector<std::int64_t> labels_;
  std::vector<float> weights_;
  std::vector<ReferenceRow> ref_;
  std::vector<float> want_grad_;          // [rows, vocab]: the reference gradient (with grad)
  std::vector<std::uint16_t> got_grad_;   // [rows, grad_stride]: the candidate's, downloaded (reused)
  gpu::DeviceBuffer x_buf_, labels_buf_, weights_buf_, loss_buf_, argmax_buf_, grad_buf_;
};

}  // namespace

Result<std::unique_ptr<tuner::Workload>> MakeXentWorkload(const gpu::Context& ctx, const ProblemSpec& spec,
                                                          std::uint64_t seed, const WorkloadOptions& options) {
  if (options.row_pad < 0 || options.row_pad % 4 != 0 || options.grad_row_pad < 0 || options.grad_row_pad % 4 != 0)
    return InvalidArgument("xent workload: row_pad and grad_row_pad must be non-negative multiples of 4");
  if (!std::isfinite(options.grad_scale) || !(options.logit_std > 0.0f))
    return InvalidArgument("xent workload: grad_scale must be finite and logit_std > 0");
  DFLASH_RETURN_IF_ERROR(ctx.MakeCurrent());
  auto w = std::make_unique<XentWorkload>(spec, options);
  DFLASH_RETURN_IF_ERROR(w->Init(seed));
  return std::unique_ptr<tuner::Workload>(std::move(w));
}

}  // namespace dflash::xent
