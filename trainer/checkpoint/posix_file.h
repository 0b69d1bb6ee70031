// PosixFile: a move-only owner of one file descriptor with the few calls the checkpoint code needs
// (open read-only, size, positioned reads that finish or fail, full writes, fsync) and AtomicWriteFile,
// the one publish path for checkpoint files: write a temporary beside the target, fsync, rename, fsync the folder.
// Called by the checkpoint readers/writers and, for AtomicWriteFile, by everything in trainer/ that publishes a
// file (config.json of models, training checkpoints, synthetic data).
// Thread-safety: ReadAt (pread) may be called from many threads on one const PosixFile; everything else is
// single-threaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string_view>

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

// Appends bytes to the file being written by AtomicWriteFile.
using ByteSink = std::function<Status(std::span<const std::byte>)>;

// Creates `path` atomically: `produce` writes the content through the sink into a temporary file in the same folder,
// which is fsync'ed and renamed over `path` (then the folder is fsync'ed). On any error the temporary is removed and
// `path` is untouched: readers see the old file or the whole new one, never a part.
Status AtomicWriteFile(const std::filesystem::path& path, const std::function<Status(const ByteSink&)>& produce);

// AtomicWriteFile of a whole text (config.json files, state files, reports).
Status AtomicWriteText(const std::filesystem::path& path, std::string_view text);

}  // namespace dflash::trainer
