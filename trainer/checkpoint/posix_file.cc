#include "trainer/checkpoint/posix_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
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

Status AtomicWriteFile(const std::filesystem::path& path, const std::function<Status(const ByteSink&)>& produce) {
  static std::atomic<unsigned> counter{0};
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const std::filesystem::path tmp =
      dir / ("." + path.filename().string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("cannot create " + tmp.string() + ": " + Errno(errno));

  auto fail = [&](Status st) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return st;
  };
  ByteSink sink = [&](std::span<const std::byte> bytes) -> Status {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, std::min<std::size_t>(bytes.size() - done, 1u << 30));
      if (n < 0) {
        if (errno == EINTR) continue;
        return IoError("write to " + tmp.string() + " failed: " + Errno(errno));
      }
      done += static_cast<std::size_t>(n);
    }
    return Status::Ok();
  };
  if (Status st = produce(sink); !st.ok()) return fail(st);
  if (::fsync(fd) != 0) return fail(IoError("fsync of " + tmp.string() + " failed: " + Errno(errno)));
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return IoError("close of " + tmp.string() + " failed: " + Errno(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return IoError("cannot rename " + tmp.string() + " to " + path.string() + ": " + Errno(err));
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    const int rc = ::fsync(dfd);
    const int err = errno;
    ::close(dfd);
    if (rc != 0) return IoError("fsync of folder " + dir.string() + " failed: " + Errno(err));
  }
  return Status::Ok();
}

Status AtomicWriteText(const std::filesystem::path& path, std::string_view text) {
  return AtomicWriteFile(path, [&](const ByteSink& sink) { return sink(std::as_bytes(std::span(text))); });
}

}  // namespace dflash::trainer
