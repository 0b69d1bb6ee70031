// The float64 CPU reference of the xent family (plain loops). Owns: the definition of the operator on the host side,
// one row at a time (x = the row's vocab logits, w its weight, s the launch's grad_scale):
//   lse     = log(sum_v exp(x_v)), computed as m + log(sum exp(x - m)) with m = max; NaN if x holds a NaN, else +inf
//             if it holds +inf, else -inf if every x_v is -inf (LibTorch's logsumexp);
//   argmax  = the first index of the maximum, a NaN counting as larger than everything (LibTorch's argmax);
//   valid   = 0 <= label < vocab and w != 0 (label -100, LibTorch's ignore_index, is one of the values outside);
//   loss    = w * (lse - x[label]) if valid, else exactly 0 (whatever the row holds);
//   grad_v  = s * w * (exp(x_v - lse) - [v == label]) if valid, NaN if valid and lse is not finite (LibTorch's
//             softmax over such a row is NaN), else exactly 0.
// Who may call it: the xent workload's check and the tests. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

namespace dflash::xent {

// LibTorch's ignore_index: the label of a row without a target.
constexpr std::int64_t kIgnoreIndex = -100;

struct ReferenceRow {
  double lse = 0.0;
  double loss = 0.0;
  std::int64_t argmax = 0;
  bool valid = false;
  std::int64_t label = 0;
  double coef = 0.0;  // s * w of a valid row, 0 for the others
};

// The row's lse, loss, argmax and what its gradient needs. Precondition: x is not empty.
ReferenceRow ReferenceXentRow(std::span<const float> x, std::int64_t label, float weight, float grad_scale);

// grad_v of the row `r` describes, for x_v = x at index v.
double ReferenceGrad(const ReferenceRow& r, float x_v, std::int64_t v);

}  // namespace dflash::xent
