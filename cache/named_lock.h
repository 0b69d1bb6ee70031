// NamedLock: an exclusive lock on a name, held across threads AND processes of one machine.
// Owns: the lock files (<dir>/<name>.lock, never deleted, so no unlink race) and the in-process mutex registry.
// How: a per-name in-process mutex (file locks are per process: two threads of one process would both "own"
// an fcntl lock), then a Boost.Interprocess file_lock on the lock file. The OS drops file locks when their
// process dies, so a holder killed with SIGKILL never blocks anyone.
// Thread-safety: Acquire from any thread; a NamedLock object is released by its destructor on any thread.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "base/status.h"

namespace dflash::cache {

class NamedLock {
 public:
  // Blocks until the lock is held, or until `timeout` passed (Busy). A name may hold [A-Za-z0-9._-] only.
  static Result<NamedLock> Acquire(const std::filesystem::path& dir, const std::string& name,
                                   std::chrono::milliseconds timeout = std::chrono::hours(24));
  // Takes the lock only if it is free right now: a null pointer (not an error) when someone else holds it.
  static Result<std::unique_ptr<NamedLock>> TryAcquire(const std::filesystem::path& dir, const std::string& name);

  NamedLock(NamedLock&&) noexcept;
  NamedLock& operator=(NamedLock&&) noexcept;
  NamedLock(const NamedLock&) = delete;
  NamedLock& operator=(const NamedLock&) = delete;
  ~NamedLock();

 private:
  struct Impl;
  explicit NamedLock(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The machine-wide directory for locks that are not tied to one cache (one benchmark per GPU across all caches):
// $DFLASH_LOCK_DIR, else /tmp/dflash-tune-locks (created mode 1777).
Result<std::filesystem::path> MachineLockDir();

}  // namespace dflash::cache
