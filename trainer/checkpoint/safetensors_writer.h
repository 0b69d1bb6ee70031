// WriteSafetensors: writes named tensors as one .safetensors file (format in safetensors.h), published with
// AtomicWriteFile (base/atomic_file.h): the path holds the old file or the complete new one.
// Header: {"__metadata__": {"format": "pt", ...extra}, name: {dtype, shape, data_offsets}...}, padded with spaces
// to a multiple of 8 bytes; data laid out by element size (largest first), then name, with no gaps, so every tensor
// starts aligned to its element size. Callers: the trainer (saving drafters) and tests (generating checkpoints).
// Thread-safety: reentrant; concurrent writers of the same path each publish a whole file, the last rename wins.
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

namespace dflash::trainer {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;  // exactly dtype × shape bytes, borrowed for the duration of the call
};

// InvalidArgument for an empty or duplicate name, the reserved name "__metadata__", or data whose size does not match
// dtype × shape; IoError when the file cannot be written. `extra_metadata` may not redefine "format".
Status WriteSafetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                        const std::map<std::string, std::string>& extra_metadata = {});

}  // namespace dflash::trainer
