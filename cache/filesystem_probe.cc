#include "cache/filesystem_probe.h"

#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dflash::cache {
namespace {

struct KnownFs {
  unsigned long magic;
  const char* name;
  bool network;
};

// statfs(2) magic numbers (linux/magic.h and the filesystems' own headers).
constexpr KnownFs kKnown[] = {
    {0xEF53, "ext4", false},         {0x58465342, "xfs", false},      {0x9123683E, "btrfs", false},
    {0x01021994, "tmpfs", false},    {0x794C7630, "overlayfs", false}, {0x2FC12FC1, "zfs", false},
    {0xF2F52010, "f2fs", false},     {0x6969, "nfs", true},           {0x517B, "smb", true},
    {0xFF534D42, "cifs", true},      {0xFE534D42, "smb2", true},      {0x0BD00BD0, "lustre", true},
    {0x47504653, "gpfs", true},      {0x5346414F, "afs", true},       {0x00C36400, "ceph", true},
    {0x19830326, "beegfs", true},    {0xAAD7AAEA, "panfs", true},     {0x01021997, "9p", true},
    {0x013111A8, "ibrix", true},     {0x73757245, "coda", true},      {0x564C, "ncp", true},
};

}  // namespace

Result<FilesystemInfo> ProbeFilesystem(const std::filesystem::path& dir) {
  FilesystemInfo info;
  if (const char* forced = std::getenv("DFLASH_TEST_FS_TYPE"); forced && *forced) {
    info.magic = std::strtoul(forced, nullptr, 16);
  } else {
    struct statfs st;
    if (::statfs(dir.c_str(), &st) != 0) {
      return IoError("cannot stat filesystem of " + dir.string() + ": " + std::strerror(errno));
    }
    info.magic = static_cast<unsigned long>(st.f_type) & 0xFFFFFFFFul;
  }
  for (const KnownFs& k : kKnown) {
    if (k.magic == info.magic) {
      info.name = k.name;
      info.is_network = k.network;
      return info;
    }
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%lx", info.magic);
  info.name = buf;
  return info;
}

bool DirectoryWritable(const std::filesystem::path& dir) { return ::access(dir.c_str(), W_OK | X_OK) == 0; }

}  // namespace dflash::cache
