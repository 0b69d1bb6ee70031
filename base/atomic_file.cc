#include "base/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

namespace dflash {
namespace {

std::string Errno(int err) { return std::strerror(err); }

// The temporary being written: closed and removed on every path that does not end in the rename.
class Temporary {
 public:
  // Creates a new temporary beside `target`, with O_EXCL: a name already taken (a crashed writer's leftover with a
  // recycled pid, another host on a shared folder) moves on to the next name.
  static Result<Temporary> Create(const std::filesystem::path& dir, const std::filesystem::path& target) {
    static std::atomic<unsigned long> counter{0};
    const std::string prefix = "." + target.filename().string() + ".tmp." + std::to_string(::getpid()) + ".";
    for (int attempt = 0;; ++attempt) {
      std::filesystem::path tmp = dir / (prefix + std::to_string(counter++));
      const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd >= 0) return Temporary(fd, std::move(tmp));
      const int err = errno;  // before anything else can change it
      if (err != EEXIST || attempt == 100) return IoError("cannot create " + tmp.string() + ": " + Errno(err));
    }
  }
  Temporary(Temporary&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) {
    other.fd_ = -1;
    other.path_.clear();
  }
  Temporary& operator=(Temporary&&) = delete;
  ~Temporary() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }

  Status Write(std::span<const std::byte> bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd_, bytes.data() + done, std::min<std::size_t>(bytes.size() - done, 1u << 30));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        return IoError("write to " + path_.string() + " failed: " + Errno(err));
      }
      if (n == 0) return IoError("write to " + path_.string() + " wrote nothing");
      done += static_cast<std::size_t>(n);
    }
    return Status::Ok();
  }

  // fsync, close and rename over `target`; afterwards nothing is left to remove.
  Status Commit(const std::filesystem::path& target) {
    if (::fsync(fd_) != 0) {
      const int err = errno;
      return IoError("fsync of " + path_.string() + " failed: " + Errno(err));
    }
    const int rc = ::close(fd_);
    const int close_err = errno;
    fd_ = -1;
    if (rc != 0) return IoError("close of " + path_.string() + " failed: " + Errno(close_err));
    if (::rename(path_.c_str(), target.c_str()) != 0) {
      const int err = errno;
      return IoError("cannot rename " + path_.string() + " to " + target.string() + ": " + Errno(err));
    }
    path_.clear();
    return Status::Ok();
  }

 private:
  Temporary(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::filesystem::path path_;
};

}  // namespace

Status AtomicWriteFile(const std::filesystem::path& path, const std::function<Status(const ByteSink&)>& produce) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  DFLASH_ASSIGN_OR_RETURN(Temporary tmp, Temporary::Create(dir, path));
  const ByteSink sink = [&tmp](std::span<const std::byte> bytes) { return tmp.Write(bytes); };
  DFLASH_RETURN_IF_ERROR(produce(sink));
  DFLASH_RETURN_IF_ERROR(tmp.Commit(path));
  return FsyncDirectory(dir);
}

Status AtomicWriteText(const std::filesystem::path& path, std::string_view bytes) {
  return AtomicWriteFile(path, [&](const ByteSink& sink) { return sink(std::as_bytes(std::span(bytes))); });
}

Status FsyncDirectory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return IoError("cannot open folder " + dir.string() + " to fsync it: " + Errno(err));
  }
  const int rc = ::fsync(fd);
  const int fsync_err = errno;
  ::close(fd);
  if (rc != 0) return IoError("fsync of folder " + dir.string() + " failed: " + Errno(fsync_err));
  return Status::Ok();
}

}  // namespace dflash
