// nvrtc_dump: compiles kernel name expressions with NVRTC exactly as the tuner does (tuner::CompileVariant: the
// same options, the same embedded-header mechanism) but from kernel sources ON DISK, so that two trees (a base
// commit's and a branch's) can be compared without rebuilding either. Every .cu / .cuh / .h file directly inside
// the folders of $SRC (':'-separated) is given to NVRTC under its base name, as tools/cmake/EmbedSources.cmake
// embeds them; MAIN is the translation unit (a family's MakeCompileSpec main file). Writes OUT.cubin and prints one
// line of ptxas resources per kernel. A developer tool, not part of the build; build it against a build tree:
//   c++ -std=c++20 -O1 -I. -I/usr/local/cuda/include tools/bench/sass/nvrtc_dump.cc -o build/nvrtc_dump \
//     build/tuner/libdflash_tuner.a build/cache/libdflash_cache.a build/base/libdflash_base.a \
//     -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lnvrtc /usr/local/cuda/lib64/stubs/libcuda.so \
//     -lsqlite3 -lcrypto -ldl -lpthread
//   SRC=kernels/attention:kernels/common build/nvrtc_dump sm_90 /tmp/x attention_kernels.cu \
//     'dflash_attn::AttnBwdKv2d<128,64,128,8,2,3>'
//   nvdisasm -c /tmp/x.cubin > /tmp/x.sass
// tools/bench/sass/sass_diff.sh drives it for a before/after comparison of every family.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tuner/nvrtc_compiler.h"

using namespace dflash;

namespace {

// The kernel sources of one folder (base name, text), as the embed rule would embed them.
bool ReadSources(const std::filesystem::path& dir, std::vector<std::pair<std::string, std::string>>& out) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) {
    std::fprintf(stderr, "cannot list %s: %s\n", dir.c_str(), ec.message().c_str());
    return false;
  }
  for (const auto& entry : it) {
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".cu" && ext != ".cuh" && ext != ".h")) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    out.emplace_back(entry.path().filename().string(),
                     std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const char* src = std::getenv("SRC");
  if (argc < 5 || src == nullptr || *src == '\0') {
    std::fprintf(stderr, "usage: SRC=DIR[:DIR...] nvrtc_dump ARCH OUT_PREFIX MAIN_FILE EXPR...\n");
    return 2;
  }
  const std::string arch = argv[1], out = argv[2];
  tuner::CompileSpec cs;
  cs.main_file = argv[3];
  for (int i = 4; i < argc; ++i) cs.name_expressions.push_back(argv[i]);

  std::vector<std::pair<std::string, std::string>> texts;
  const std::string dirs = src;
  for (std::size_t start = 0; start <= dirs.size();) {
    std::size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    if (end > start && !ReadSources(dirs.substr(start, end - start), texts)) return 2;
    start = end + 1;
  }
  std::vector<EmbeddedFile> files;
  for (const auto& [name, text] : texts) files.push_back({name.c_str(), text.c_str(), text.size()});

  Result<tuner::CompiledVariant> r = tuner::CompileVariant(files, cs, arch, "nvrtc_dump");
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
    return 1;
  }
  // ptxas's advisories (e.g. "wgmma.mma_async instructions are serialized due to ...") go to stderr.
  for (std::size_t pos = 0; pos < r->log.size();) {
    const std::size_t end = std::min(r->log.find('\n', pos), r->log.size());
    const std::string line = r->log.substr(pos, end - pos);
    if (line.find("arning") != std::string::npos || line.find("Performance") != std::string::npos)
      std::fprintf(stderr, "%s\n", line.c_str());
    pos = end + 1;
  }
  std::ofstream(out + ".cubin", std::ios::binary)
      .write(reinterpret_cast<const char*>(r->cubin.data()), static_cast<std::streamsize>(r->cubin.size()));
  for (const auto& [expr, mangled] : r->lowered_names) {
    const tuner::ResourceUsage& u = r->resources[mangled];
    std::printf("%s %s %s regs %d stack %d spill_st %d spill_ld %d smem %d\n", arch.c_str(), expr.c_str(),
                mangled.c_str(), u.registers, u.stack_frame, u.spill_stores, u.spill_loads, u.shared_bytes);
  }
  return 0;
}
