#include "kernels/attention/attention_tolerance.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace dflash::attention {

double Bf16HalfUlp(double x) {
  const double a = std::abs(x);
  if (!(a > 0) || std::isinf(a)) return 0;
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): bf16 keeps 8 significant bits, spacing 2^(e - 8)
  e = std::max(e, -125);  // subnormal bf16 values share the smallest normal spacing
  return std::ldexp(1.0, e - 9);
}

void ErrorTally::Add(double got, double ref, double plain) {
  if (std::isnan(got)) nan_ = true;
  err_ = std::max(err_, std::abs(got - ref));
  base_ = std::max(base_, std::abs(plain - ref));
  max_ref_ = std::max(max_ref_, std::abs(ref));
}

std::string ErrorTally::ToString() const {
  std::ostringstream s;
  s << name_ << " err " << err_ << (ok() ? " <= " : " > ") << "tolerance " << tolerance() << " (plain bf16 " << base_
    << ", max |ref| " << max_ref_ << ")" << (nan_ ? " NaN" : "");
  return s.str();
}

}  // namespace dflash::attention
