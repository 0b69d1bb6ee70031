// Static SASS helper (attention session 7; gdn session 8): compiles name expressions with NVRTC exactly as the
// tuner does (tuner::CompileVariant, the family's sources and options), but from the kernel sources ON DISK ($SRC,
// default kernels/attention or kernels/gdn), so that two trees can be compared without rebuilding; writes OUT.cubin
// and prints each kernel's ptxas resources. $FAMILY picks the family: attention (default: the backward family) or
// gdn (main file gdn_kernels.cu, e.g. 'gdn::gdn_chunk_fused<32, 64, 8, 1>'). Not part of the build (a throwaway
// developer tool); build it against a build tree:
//   c++ -std=c++20 -O1 -I. -I/usr/local/cuda/include tools/bench/sass/nvrtc_dump.cc -o build-attn/nvrtc_dump \
//     build-attn/kernels/libdflash_kernels.a build-attn/tuner/libdflash_tuner.a build-attn/cache/libdflash_cache.a \
//     -L/usr/local/cuda/lib -Wl,-rpath,/usr/local/cuda/lib -lnvrtc /usr/local/cuda/lib/stubs/libcuda.so \
//     -lsqlite3 -lcrypto -ldl
//   SRC=kernels/attention build-attn/nvrtc_dump sm_90 /tmp/x 'dflash_attn::AttnBwdKv2d<128,64,128,8,2,1>'
//   FAMILY=gdn SRC=kernels/gdn build-sass/nvrtc_dump sm_90 /tmp/g 'gdn::gdn_chunk_fused<32, 64, 8, 1>'
// Then: nvdisasm -c /tmp/x.cubin > /tmp/x.sass; tools/bench/sass/sass_blocks.py /tmp/x.sass Kv2d...
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kernels/attention/attention_family.h"
#include "kernels/gdn/gdn_family.h"
#include "tuner/nvrtc_compiler.h"

using namespace dflash;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: SRC=DIR nvrtc_dump ARCH OUT_PREFIX EXPR...\n");
    return 2;
  }
  const std::string arch = argv[1], out = argv[2];
  const bool gdn = std::getenv("FAMILY") != nullptr && std::string(std::getenv("FAMILY")) == "gdn";
  tuner::CompileSpec cs;
  cs.main_file = gdn ? "gdn_kernels.cu" : "attention_kernels.cu";  // the families' MakeCompileSpec main files
  for (int i = 3; i < argc; ++i) cs.name_expressions.push_back(argv[i]);
  const tuner::KernelFamily& family = gdn ? gdn::ChunkedForwardFamily() : attention::BackwardFamily();
  const char* dir = std::getenv("SRC") ? std::getenv("SRC") : (gdn ? "kernels/gdn" : "kernels/attention");
  std::vector<std::string> texts;
  for (const EmbeddedFile& f : family.sources()) {
    std::ifstream in(std::string(dir) + "/" + f.name);
    if (!in) {
      std::fprintf(stderr, "cannot read %s/%s\n", dir, f.name);
      return 2;
    }
    texts.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::vector<EmbeddedFile> files;
  std::size_t i = 0;
  for (const EmbeddedFile& f : family.sources()) {
    files.push_back({f.name, texts[i].c_str(), texts[i].size()});
    ++i;
  }
  Result<tuner::CompiledVariant> r = tuner::CompileVariant(files, cs, arch, "nvrtc_dump");
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
    return 1;
  }
  std::ofstream(out + ".cubin", std::ios::binary).write(reinterpret_cast<const char*>(r->cubin.data()),
                                                        static_cast<std::streamsize>(r->cubin.size()));
  for (const auto& [expr, mangled] : r->lowered_names) {
    const tuner::ResourceUsage& u = r->resources[mangled];
    std::printf("%s %s regs %d stack %d spill_st %d spill_ld %d smem %d\n", arch.c_str(), expr.c_str(), u.registers,
                u.stack_frame, u.spill_stores, u.spill_loads, u.shared_bytes);
  }
  return 0;
}
