// Atomic file publishing: the one way dflash-tune writes a file that others read or that must survive a crash
// (kernel bundles, safetensors, config.json and state.json, checkpoints' `latest`, the tiny preset's files, benchmark
// instance files). A reader, or the next run after a kill or a power cut, sees the old file or the whole new one,
// never a part. Append logs (metrics.jsonl, trace files) are not published this way.
// Who may call: any library or tool. Thread-safety: reentrant; any number of threads and processes may write the
// same target at once (each uses its own temporary; the last rename wins).
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <string_view>

#include "base/status.h"

namespace dflash {

// Appends bytes to the file being written by AtomicWriteFile.
using ByteSink = std::function<Status(std::span<const std::byte>)>;

// Publishes `path`: `produce` writes the content through the sink into a new temporary in the same folder
// (".<name>.tmp.<pid>.<unique>", never the target's name), which is fsync'ed, renamed over `path`, and the folder
// fsync'ed. On any error (the Status names the file and the OS's reason) the temporary is removed and `path` is
// untouched. Only a process killed mid-write leaves its temporary behind.
Status AtomicWriteFile(const std::filesystem::path& path, const std::function<Status(const ByteSink&)>& produce);

// AtomicWriteFile of bytes held in memory (JSON and text files, bundles).
Status AtomicWriteText(const std::filesystem::path& path, std::string_view bytes);

// fsync of a folder, so that the entries created, renamed or removed in it survive a power cut (a file's own fsync
// does not cover its name). AtomicWriteFile does this itself; callers need it when they publish a folder by rename.
Status FsyncDirectory(const std::filesystem::path& dir);

}  // namespace dflash
