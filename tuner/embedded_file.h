// EmbeddedFile: one kernel source file compiled into the binary (see tools/cmake/EmbedSources.cmake).
// Owns nothing: the bytes are static storage. Kernel families expose their sources as tables of these so that
// nothing is read from disk at run time and the source hash covers exactly what NVRTC compiles.
#pragma once

#include <cstddef>
#include <string_view>

namespace dflash {

struct EmbeddedFile {
  const char* name;  // base name, as the kernel sources #include it
  const char* data;  // NUL-terminated
  std::size_t size;  // bytes, without the NUL
  std::string_view text() const { return {data, size}; }
};

}  // namespace dflash
