// What kind of filesystem a cache directory lives on, and whether we may write there.
// SQLite's WAL mode needs shared memory and POSIX locks that network filesystems (NFS, Lustre, GPFS, CIFS, ...)
// do not provide reliably, so the cache refuses them. Tests inject a filesystem type through
// DFLASH_TEST_FS_TYPE (a statfs magic number, hex) to exercise the refusal on a local disk.
// Thread-safety: pure functions.
#pragma once

#include <filesystem>
#include <string>

#include "base/status.h"

namespace dflash::cache {

struct FilesystemInfo {
  unsigned long magic = 0;   // statfs f_type
  std::string name;          // "ext4", "nfs", "lustre", ... or "0x..." when unknown
  bool is_network = false;
};

Result<FilesystemInfo> ProbeFilesystem(const std::filesystem::path& dir);
// True when this process can create files in `dir`.
bool DirectoryWritable(const std::filesystem::path& dir);

}  // namespace dflash::cache
