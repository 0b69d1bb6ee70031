// Tensor I/O between LibTorch and safetensors (trainer/checkpoint): the one place that maps torch dtypes to
// safetensors dtypes and copies bytes in and out of tensors.
//   SaveTensors: named tensors (any device) -> one .safetensors file, atomically (checkpoint/safetensors_writer.h),
//                optionally converted to one dtype (e.g. bf16 for published weights).
//   ReadTensor:  one tensor of a Checkpoint, its shape checked when given, converted to (device, dtype).
//   ReadAllTensors: every tensor of a file (training state, optimizer moments).
// Who may call: the models' Load/Save and the training checkpoints. Thread-safety: reentrant.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "trainer/checkpoint/checkpoint.h"

namespace dflash::trainer::nn {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// InvalidArgument for a dtype safetensors cannot hold; IoError from the writer.
Status SaveTensors(const std::filesystem::path& path, const NamedTensors& tensors,
                   std::optional<torch::Dtype> as_dtype = std::nullopt,
                   const std::map<std::string, std::string>& metadata = {});

// NotFound / InvalidArgument (shape) naming the tensor and the checkpoint.
Result<torch::Tensor> ReadTensor(const Checkpoint& checkpoint, const std::string& name,
                                 std::optional<std::vector<std::int64_t>> expected_shape, torch::Device device,
                                 torch::Dtype dtype);

// Every tensor of `path` in its stored dtype, on `device`, sorted by name.
Result<NamedTensors> ReadAllTensors(const std::filesystem::path& path, torch::Device device);

}  // namespace dflash::trainer::nn
