#include "kernels/xent/reference.h"

#include <cmath>
#include <limits>

namespace dflash::xent {

ReferenceRow ReferenceXentRow(std::span<const float> x, std::int64_t label, float weight, float grad_scale) {
  ReferenceRow r;
  const std::int64_t vocab = static_cast<std::int64_t>(x.size());
  bool has_nan = false, has_pos_inf = false;
  std::int64_t first_nan = -1, first_max = 0;
  double m = -std::numeric_limits<double>::infinity();
  for (std::int64_t v = 0; v < vocab; ++v) {
    const double xv = x[v];
    if (std::isnan(xv)) {
      if (!has_nan) first_nan = v;
      has_nan = true;
      continue;
    }
    if (xv == std::numeric_limits<double>::infinity()) has_pos_inf = true;
    if (xv > m) {
      m = xv;
      first_max = v;
    }
  }
  r.argmax = has_nan ? first_nan : first_max;
  if (has_nan) {
    r.lse = std::numeric_limits<double>::quiet_NaN();
  } else if (has_pos_inf || m == -std::numeric_limits<double>::infinity()) {
    r.lse = m;  // +inf, or -inf for a row of -inf
  } else {
    double sum = 0.0;
    for (float xv : x) sum += std::exp(static_cast<double>(xv) - m);
    r.lse = m + std::log(sum);
  }
  r.valid = label >= 0 && label < vocab && weight != 0.0f;
  r.label = label;
  if (r.valid) {
    r.coef = static_cast<double>(grad_scale) * static_cast<double>(weight);
    r.loss = static_cast<double>(weight) * (r.lse - static_cast<double>(x[label]));
  }
  return r;
}

double ReferenceGrad(const ReferenceRow& r, float x_v, std::int64_t v) {
  if (!r.valid) return 0.0;
  if (!std::isfinite(r.lse)) return std::numeric_limits<double>::quiet_NaN();
  return r.coef * (std::exp(static_cast<double>(x_v) - r.lse) - (v == r.label ? 1.0 : 0.0));
}

}  // namespace dflash::xent
