// Checkpoint: a Hugging Face model's weights as one logical set of named tensors, whether stored in one
// .safetensors file or sharded (model.safetensors.index.json with {"weight_map": {name: shard file}}).
// Open(path) accepts a .safetensors file, or a folder holding model.safetensors.index.json (preferred) or
// model.safetensors. Open validates every shard's header (see safetensors.h) and that each indexed tensor is in the
// shard the index names; no tensor data is read until Read. Expect/CheckTensors let a loader verify names, dtypes and
// shapes of everything it needs before reading anything.
// Callers: the trainer's model loaders and tests. Thread-safety: after Open, const methods may be called from many
// threads at once (reads are positioned preads).
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "trainer/checkpoint/safetensors.h"

namespace dflash::trainer {

inline constexpr char kSafetensorsIndexName[] = "model.safetensors.index.json";
inline constexpr char kSingleSafetensorsName[] = "model.safetensors";

// What a loader needs of one tensor. dtype nullopt: any dtype is accepted (the loader converts).
struct TensorSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  std::optional<DType> dtype;
};

class Checkpoint {
 public:
  static Result<Checkpoint> Open(const std::filesystem::path& path);

  // The file or folder it was opened from.
  const std::filesystem::path& path() const { return path_; }
  bool Has(const std::string& name) const { return where_.count(name) != 0; }
  // Every tensor name, sorted.
  std::vector<std::string> Names() const;
  std::size_t num_shards() const { return shards_.size(); }
  Result<TensorInfo> Info(const std::string& name) const;
  // The shard file that holds `name`.
  Result<std::filesystem::path> FileOf(const std::string& name) const;

  // Reads tensor `name` into `out`, which must be exactly its size in bytes.
  Status Read(const std::string& name, std::span<std::byte> out) const;
  Result<std::vector<std::byte>> Read(const std::string& name) const;

  // OK when `name` exists with this dtype and shape; otherwise NotFound ("tensor X not found in ...") or
  // InvalidArgument ("tensor X has shape [a,b], expected [c,d]" / "tensor X has dtype F32, expected BF16").
  Status Expect(const std::string& name, DType dtype, std::span<const std::int64_t> shape) const;
  Status Expect(const TensorSpec& spec) const;
  // Checks every spec and reports all problems in one Status: "<k> of <n> tensors do not match <path>: <first>; ...".
  Status CheckTensors(std::span<const TensorSpec> specs) const;

 private:
  Checkpoint() = default;
  std::filesystem::path path_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, std::size_t> where_;  // tensor name -> shard index
};

}  // namespace dflash::trainer
