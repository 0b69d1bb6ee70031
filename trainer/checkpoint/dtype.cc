#include "trainer/checkpoint/dtype.h"

#include <array>
#include <limits>
#include <utility>

namespace dflash::trainer {
namespace {

struct DTypeRow {
  DType dtype;
  std::string_view name;
  std::size_t size;
};

constexpr std::array<DTypeRow, 16> kRows = {{
    {DType::kBool, "BOOL", 1},   {DType::kU8, "U8", 1},         {DType::kI8, "I8", 1},
    {DType::kF8E5M2, "F8_E5M2", 1}, {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E8M0, "F8_E8M0", 1},
    {DType::kI16, "I16", 2},     {DType::kU16, "U16", 2},       {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},   {DType::kI32, "I32", 4},       {DType::kU32, "U32", 4},
    {DType::kF32, "F32", 4},     {DType::kF64, "F64", 8},       {DType::kI64, "I64", 8},
    {DType::kU64, "U64", 8},
}};

const DTypeRow& Row(DType dtype) {
  for (const auto& r : kRows) {
    if (r.dtype == dtype) return r;
  }
  return kRows[0];  // unreachable: every enumerator has a row
}

}  // namespace

std::string_view DTypeName(DType dtype) { return Row(dtype).name; }
std::size_t DTypeSize(DType dtype) { return Row(dtype).size; }

std::optional<DType> ParseDType(std::string_view name) {
  for (const auto& r : kRows) {
    if (r.name == name) return r.dtype;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> NumElements(std::span<const std::int64_t> shape) {
  constexpr std::uint64_t kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  std::uint64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) return std::nullopt;
    const auto u = static_cast<std::uint64_t>(d);
    if (u != 0 && n > kMax / u) return std::nullopt;
    n *= u;
  }
  return n;
}

std::optional<std::uint64_t> NumBytes(DType dtype, std::span<const std::int64_t> shape) {
  constexpr std::uint64_t kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  auto n = NumElements(shape);
  if (!n) return std::nullopt;
  const std::uint64_t size = DTypeSize(dtype);
  if (*n > kMax / size) return std::nullopt;
  return *n * size;
}

std::string ShapeToString(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace dflash::trainer
