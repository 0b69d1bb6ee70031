#include "trainer/nn/tensor_io.h"

#include "trainer/checkpoint/safetensors_writer.h"

namespace dflash::trainer::nn {
namespace {

std::optional<DType> ToSafetensors(torch::Dtype t) {
  switch (t) {
    case torch::kBFloat16: return DType::kBF16;
    case torch::kFloat16: return DType::kF16;
    case torch::kFloat32: return DType::kF32;
    case torch::kFloat64: return DType::kF64;
    case torch::kInt32: return DType::kI32;
    case torch::kInt64: return DType::kI64;
    case torch::kUInt8: return DType::kU8;
    case torch::kInt8: return DType::kI8;
    case torch::kBool: return DType::kBool;
    default: return std::nullopt;
  }
}

std::optional<torch::Dtype> ToTorch(DType d) {
  switch (d) {
    case DType::kBF16: return torch::kBFloat16;
    case DType::kF16: return torch::kFloat16;
    case DType::kF32: return torch::kFloat32;
    case DType::kF64: return torch::kFloat64;
    case DType::kI32: return torch::kInt32;
    case DType::kI64: return torch::kInt64;
    case DType::kU8: return torch::kUInt8;
    case DType::kI8: return torch::kInt8;
    case DType::kBool: return torch::kBool;
    default: return std::nullopt;
  }
}

Result<torch::Tensor> ToTensor(const TensorInfo& info, std::vector<std::byte> bytes, const std::string& where) {
  const auto dtype = ToTorch(info.dtype);
  if (!dtype) {
    return InvalidArgument("tensor " + info.name + " in " + where + " has dtype " +
                           std::string(DTypeName(info.dtype)) + ", which the trainer cannot load");
  }
  auto holder = std::make_shared<std::vector<std::byte>>(std::move(bytes));
  auto t = torch::from_blob(holder->data(), info.shape, [holder](void*) {}, torch::TensorOptions().dtype(*dtype));
  return t.clone();
}

}  // namespace

Status SaveTensors(const std::filesystem::path& path, const NamedTensors& tensors,
                   std::optional<torch::Dtype> as_dtype, const std::map<std::string, std::string>& metadata) {
  std::vector<torch::Tensor> host;  // keeps the converted copies alive during the write
  std::vector<TensorToWrite> out;
  host.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    auto h = t.detach().to(torch::kCPU, as_dtype.value_or(t.scalar_type())).contiguous();
    const auto dtype = ToSafetensors(h.scalar_type());
    if (!dtype) return InvalidArgument("tensor " + name + ": dtype not representable in safetensors");
    host.push_back(h);
    out.push_back({name, *dtype, std::vector<std::int64_t>(h.sizes().begin(), h.sizes().end()),
                   std::span<const std::byte>(static_cast<const std::byte*>(h.data_ptr()), h.nbytes())});
  }
  return WriteSafetensors(path, out, metadata);
}

Result<torch::Tensor> ReadTensor(const Checkpoint& checkpoint, const std::string& name,
                                 std::optional<std::vector<std::int64_t>> expected_shape, torch::Device device,
                                 torch::Dtype dtype) {
  const std::string where = checkpoint.path().string();
  DFLASH_ASSIGN_OR_RETURN(auto info, checkpoint.Info(name));
  if (expected_shape && info.shape != *expected_shape) {
    return InvalidArgument("tensor " + name + " in " + where + " has shape " + ShapeToString(info.shape) +
                           ", expected " + ShapeToString(*expected_shape));
  }
  DFLASH_ASSIGN_OR_RETURN(auto bytes, checkpoint.Read(name));
  DFLASH_ASSIGN_OR_RETURN(auto t, ToTensor(info, std::move(bytes), where));
  return t.to(device, dtype);
}

Result<NamedTensors> ReadAllTensors(const std::filesystem::path& path, torch::Device device) {
  DFLASH_ASSIGN_OR_RETURN(auto checkpoint, Checkpoint::Open(path));
  NamedTensors out;
  for (const auto& name : checkpoint.Names()) {
    DFLASH_ASSIGN_OR_RETURN(auto info, checkpoint.Info(name));
    DFLASH_ASSIGN_OR_RETURN(auto bytes, checkpoint.Read(name));
    DFLASH_ASSIGN_OR_RETURN(auto t, ToTensor(info, std::move(bytes), path.string()));
    out.emplace_back(name, t.to(device));
  }
  return out;
}

}  // namespace dflash::trainer::nn
