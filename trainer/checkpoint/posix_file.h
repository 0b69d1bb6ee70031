// PosixFile: a move-only owner of one file descriptor opened read-only, with the few calls the checkpoint readers
// need (size, positioned reads that finish or fail). Files are written through base/atomic_file.h.
// Called by the safetensors reader. Thread-safety: ReadAt (pread) may be called from many threads on one const
// PosixFile; everything else is single-threaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

#include "base/status.h"

namespace dflash::trainer {

class PosixFile {
 public:
  PosixFile() = default;
  ~PosixFile();
  PosixFile(PosixFile&& other) noexcept;
  PosixFile& operator=(PosixFile&& other) noexcept;
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;

  static Result<PosixFile> OpenReadOnly(const std::filesystem::path& path);

  bool is_open() const { return fd_ >= 0; }
  const std::filesystem::path& path() const { return path_; }
  Result<std::uint64_t> Size() const;
  // Fills `out` from `offset`; a file that ends early is Corruption (the file shrank or is truncated).
  Status ReadAt(std::uint64_t offset, std::span<std::byte> out) const;

 private:
  PosixFile(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::filesystem::path path_;
};

}  // namespace dflash::trainer
