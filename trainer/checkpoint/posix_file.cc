#include "trainer/checkpoint/posix_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace dflash::trainer {
namespace {

std::string Errno(int err) { return std::strerror(err); }

}  // namespace

PosixFile::~PosixFile() {
  if (fd_ >= 0) ::close(fd_);
}

PosixFile::PosixFile(PosixFile&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }

PosixFile& PosixFile::operator=(PosixFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

Result<PosixFile> PosixFile::OpenReadOnly(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return NotFound("no such file: " + path.string());
    return IoError("cannot open " + path.string() + ": " + Errno(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument("not a regular file: " + path.string());
  }
  return PosixFile(fd, path);
}

Result<std::uint64_t> PosixFile::Size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return IoError("cannot stat " + path_.string() + ": " + Errno(errno));
  return static_cast<std::uint64_t>(st.st_size);
}

Status PosixFile::ReadAt(std::uint64_t offset, std::span<std::byte> out) const {
  std::size_t done = 0;
  while (done < out.size()) {
    const std::size_t chunk = std::min<std::size_t>(out.size() - done, std::size_t{1} << 30);
    const ssize_t n = ::pread(fd_, out.data() + done, chunk, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("read of " + path_.string() + " failed at byte " + std::to_string(offset + done) + ": " +
                     Errno(errno));
    }
    if (n == 0) {
      return Corruption(path_.string() + " ends at byte " + std::to_string(offset + done) + ", expected " +
                        std::to_string(offset + out.size()) + " bytes (truncated since it was opened?)");
    }
    done += static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

}  // namespace dflash::trainer
