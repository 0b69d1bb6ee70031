// bf16 <-> float conversions for the host side of every kernel family (inputs, references, checks), and the spacing
// of bf16 values (the unit of the checks' tolerances). Round to nearest even; NaN stays a (quiet) NaN.
// Thread-safety: pure functions.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace dflash {

inline float Bf16ToFloat(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline std::uint16_t FloatToBf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

// The spacing of bf16 values at |v|: 2^(e - 7) for a normal |v| = 1.m * 2^e; 2^-133 (the subnormal spacing) below
// 2^-126.
inline double Bf16Ulp(double v) {
  const double a = std::fabs(v);
  if (a < 0x1p-126) return 0x1p-133;
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  return std::ldexp(1.0, e - 8);
}

}  // namespace dflash
