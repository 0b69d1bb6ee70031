// DType: the element types a safetensors file may declare, their on-disk names ("BF16") and byte sizes.
// Owns: the mapping name <-> enum and the shape/byte arithmetic (with overflow checks) every reader and writer uses.
// Any code may call it. Thread-safety: pure functions over constant tables.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dflash::trainer {

enum class DType { kBool, kU8, kI8, kF8E5M2, kF8E4M3, kF8E8M0, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kF64, kI64, kU64 };

// "BF16", "F32", ... exactly as safetensors writes them.
std::string_view DTypeName(DType dtype);
// nullopt for a name safetensors does not define or that this reader does not support (sub-byte types).
std::optional<DType> ParseDType(std::string_view name);
std::size_t DTypeSize(DType dtype);

// Number of elements of a shape; nullopt when a dimension is negative or the product overflows 2^63.
std::optional<std::uint64_t> NumElements(std::span<const std::int64_t> shape);
// Elements × element size; nullopt on a negative dimension or overflow.
std::optional<std::uint64_t> NumBytes(DType dtype, std::span<const std::int64_t> shape);
// "[5120,25600]"
std::string ShapeToString(std::span<const std::int64_t> shape);

}  // namespace dflash::trainer
