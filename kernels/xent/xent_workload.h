// Xent workloads: one problem instance on a device with fresh random inputs (logits ~ N(0, logit_std^2), labels
// uniform in [0, vocab), weights uniform in [0.25, 2)), a set of planted rows that reach every case of the operator
// (SpecialRow), output poisoning (NaN loss, argmax -1, NaN gradient, also in the gradient rows' padding), launch
// through LaunchXent, and the check against the float64 reference.
// Tolerances: loss |got - want| <= kLossRelTol * |want| + kLossLseUlps * 2^-24 * |w * lse| (the kernel's loss is
// the difference of two fp32 numbers of the size of lse); argmax exact (both sides compare the same fp32 values,
// so a tie in the data is a tie for both); grad within one bf16 ulp of the float64 value plus
// kGradAbsTol * |grad_scale * w| + 2^-133 (ex2.approx.ftz flushes results below 2^-126; bf16's smallest step), plus
// kLabelGradAbsTol * |grad_scale * w| at the label, where p - 1 turns the relative error of p (ex2.approx's 2^-22,
// the fp32 sum's rounding) into an absolute one.
// NaN must be NaN and an infinity the same infinity.
// Who may call it: the family's MakeWorkload and the tests. Thread-safety: a workload belongs to one thread.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "kernels/xent/xent_problem.h"
#include "tuner/gpu_runtime.h"
#include "tuner/kernel_family.h"

namespace dflash::xent {

// The planted rows, one of each kind spread over the rows (when rows >= 2 * kSpecialRowKinds and vocab >= 4).
enum class SpecialRow {
  kIgnoredLabel,      // label -100
  kZeroWeight,        // w = 0, a valid label
  kZeroWeightNanInf,  // w = 0 and the row holds a NaN and a +inf: loss and grad still exactly 0
  kIgnoredWithNans,   // label -100, two NaNs: argmax is the first
  kTiedMax,           // the maximum at two positions: argmax is the first
  kSomeNegInf,        // every third logit -inf, the label on a finite one
  kHugeLogit,         // one logit 1e4 (exp overflows without the max), the label elsewhere
  kHugeLogitIsLabel,  // the same with the label on it (loss ~ 0)
  kAllNegInf,         // every logit -inf, a valid label: lse -inf, loss and grad NaN
  kPosInf,            // one logit +inf, the label elsewhere: lse +inf, loss +inf, grad NaN
  kLabelTooLarge,     // label = vocab: ignored
  kLabelNegative,     // label -5: ignored
};
constexpr int kSpecialRowKinds = 12;

struct WorkloadOptions {
  bool special_rows = true;
  std::int64_t row_pad = 0;       // elements after round_up(vocab, 4) in each logits row (a multiple of 4)
  std::int64_t grad_row_pad = 0;  // the same for the gradient rows
  float grad_scale = 0.75f;       // not 1, so that a kernel that ignores it fails
  float logit_std = 2.0f;
};

constexpr double kLossRelTol = 1e-5;
constexpr double kLossLseUlps = 8.0;
constexpr double kGradAbsTol = 0x1p-126;
constexpr double kLabelGradAbsTol = 0x1p-20;

Result<std::unique_ptr<tuner::Workload>> MakeXentWorkload(const gpu::Context& ctx, const ProblemSpec& spec,
                                                          std::uint64_t seed, const WorkloadOptions& options = {});

}  // namespace dflash::xent
