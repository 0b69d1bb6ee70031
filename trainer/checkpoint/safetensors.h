// SafetensorsFile: one validated .safetensors file, its tensor table and metadata, read tensor by tensor.
// Format (huggingface/safetensors): u64 little-endian N, then N bytes of UTF-8 JSON
//   {"<name>": {"dtype": "BF16", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string value>", ...}}   (the header may be padded with trailing spaces),
// then the data buffer; offsets are relative to the start of the buffer (byte 8 + N).
// Open validates everything before any tensor is read: N against the file size (and a 100 MB cap), the JSON shape of
// every entry, known dtypes, end - begin == bytes of dtype × shape, offsets inside the buffer, no two tensors
// overlapping, no gap between tensors and no trailing bytes (as the reference implementation requires), unique names.
// Errors name the file and the tensor. Reads use pread on the tensor's own byte range: no whole-file load.
// Callers: checkpoint.cc (the logical checkpoint) and tests. Thread-safety: after Open, const methods (Info, Read)
// may be called from many threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "trainer/checkpoint/dtype.h"
#include "trainer/checkpoint/posix_file.h"

namespace dflash::trainer {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<std::int64_t> shape;
  std::uint64_t data_begin = 0;  // relative to the data buffer
  std::uint64_t data_end = 0;
  std::uint64_t num_bytes() const { return data_end - data_begin; }
};

inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

class SafetensorsFile {
 public:
  static Result<SafetensorsFile> Open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return file_.path(); }
  // Tensor entries, sorted by name.
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool Has(const std::string& name) const { return tensors_.count(name) != 0; }
  Result<TensorInfo> Info(const std::string& name) const;
  // `out` must be exactly the tensor's size in bytes.
  Status Read(const std::string& name, std::span<std::byte> out) const;

 private:
  SafetensorsFile() = default;
  PosixFile file_;
  std::uint64_t data_start_ = 0;  // 8 + N
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace dflash::trainer
