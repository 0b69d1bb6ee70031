#include "cache/named_lock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/interprocess/sync/file_lock.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

namespace dflash::cache {
namespace {

// In-process registry: one timed mutex per lock-file path. Entries are never erased (a handful of names per
// process); erasing would race with a thread that is about to wait on the mutex.
std::timed_mutex& MutexFor(const std::string& path) {
  static std::mutex registry_mu;
  static std::map<std::string, std::unique_ptr<std::timed_mutex>> registry;
  std::lock_guard<std::mutex> g(registry_mu);
  auto& slot = registry[path];
  if (!slot) slot = std::make_unique<std::timed_mutex>();
  return *slot;
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 200) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return name[0] != '.';
}

// Creates the lock file if needed (O_CREAT without truncation, so an existing lock file is left alone).
Status EnsureLockFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return IoError("cannot create lock file " + path + ": " + std::strerror(errno));
  ::fchmod(fd, 0666);  // past the umask: other users' processes must be able to lock it too (best effort)
  ::close(fd);
  return Status::Ok();
}

}  // namespace

struct NamedLock::Impl {
  std::timed_mutex* mu = nullptr;
  boost::interprocess::file_lock file;
  ~Impl() {
    try {
      file.unlock();
    } catch (...) {
      // Unlocking a lock we hold cannot fail in practice; closing the descriptor drops it anyway.
    }
    if (mu) mu->unlock();
  }
};

NamedLock::NamedLock(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NamedLock::NamedLock(NamedLock&&) noexcept = default;
NamedLock& NamedLock::operator=(NamedLock&&) noexcept = default;
NamedLock::~NamedLock() = default;

Result<NamedLock> NamedLock::Acquire(const std::filesystem::path& dir, const std::string& name,
                                     std::chrono::milliseconds timeout) {
  if (!ValidName(name)) return InvalidArgument("invalid lock name '" + name + "'");
  const std::string path = (dir / (name + ".lock")).string();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::timed_mutex& mu = MutexFor(path);
  if (!mu.try_lock_until(deadline)) return Busy("timed out waiting for lock " + path);
  auto impl = std::make_unique<Impl>();
  impl->mu = &mu;  // from here on, Impl's destructor releases the mutex
  if (Status st = EnsureLockFile(path); !st.ok()) return st;
  try {
    impl->file = boost::interprocess::file_lock(path.c_str());
    // Poll with try_lock so the timeout is honoured; back off up to 20 ms between tries.
    auto pause = std::chrono::microseconds(200);
    while (!impl->file.try_lock()) {
      if (std::chrono::steady_clock::now() >= deadline) return Busy("timed out waiting for lock " + path);
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(20));
    }
  } catch (const boost::interprocess::interprocess_exception& e) {
    return IoError("cannot lock " + path + ": " + e.what());
  }
  return NamedLock(std::move(impl));
}

Result<std::unique_ptr<NamedLock>> NamedLock::TryAcquire(const std::filesystem::path& dir,
                                                         const std::string& name) {
  if (!ValidName(name)) return InvalidArgument("invalid lock name '" + name + "'");
  const std::string path = (dir / (name + ".lock")).string();
  std::timed_mutex& mu = MutexFor(path);
  if (!mu.try_lock()) return std::unique_ptr<NamedLock>();
  auto impl = std::make_unique<Impl>();
  impl->mu = &mu;
  if (Status st = EnsureLockFile(path); !st.ok()) return st;
  try {
    impl->file = boost::interprocess::file_lock(path.c_str());
    if (!impl->file.try_lock()) return std::unique_ptr<NamedLock>();
  } catch (const boost::interprocess::interprocess_exception& e) {
    return IoError("cannot lock " + path + ": " + e.what());
  }
  return std::unique_ptr<NamedLock>(new NamedLock(std::move(impl)));
}

Result<std::filesystem::path> MachineLockDir() {
  const char* env = std::getenv("DFLASH_LOCK_DIR");
  std::filesystem::path dir = env && *env ? env : "/tmp/dflash-tune-locks";
  std::error_code ec;
  if (std::filesystem::create_directories(dir, ec)) {
    ::chmod(dir.c_str(), 01777);  // shared by every user's warmups on this machine
  }
  if (ec && !std::filesystem::is_directory(dir)) {
    return IoError("cannot create lock directory " + dir.string() + ": " + ec.message());
  }
  return dir;
}

}  // namespace dflash::cache
