// NVRTC compilation of one kernel variant straight to a cubin for one arch, with the ptxas resource report.
// Owns: the NVRTC program lifetime (RAII), option assembly, name-expression lowering, the source hash, and the
// parsing of ptxas's "-v" report. Pure host code: works without a GPU (CI compiles sm_90 and sm_120 here).
// Thread-safety: CompileVariant is re-entrant; call it from any number of threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tuner/embedded_file.h"
#include "tuner/kernel_family.h"

namespace dflash::tuner {

// Per-kernel resources as ptxas reports them.
struct ResourceUsage {
  int registers = 0;
  int shared_bytes = 0;   // static shared memory
  int stack_frame = 0;
  int spill_stores = 0;
  int spill_loads = 0;
  int constant_bytes = 0;
};

struct CompiledVariant {
  std::string arch;                                      // "sm_120"
  std::vector<std::uint8_t> cubin;
  std::map<std::string, std::string> lowered_names;      // name expression -> mangled name
  std::map<std::string, ResourceUsage> resources;        // mangled name -> resources (every lowered name has one)
  std::string log;                                       // the full NVRTC/ptxas log
  double compile_ms = 0.0;
};

// "13.0" from nvrtcVersion().
std::string NvrtcVersion();
// True for the archs we know the limits of and NVRTC can target ("sm_75"…"sm_121", and "sm_90a", the one
// arch-specific target in the limits table; no "f" suffixes).
bool IsValidArch(std::string_view arch);
// Every valid arch ("sm_75", "sm_80", ...), oldest first: the limits table filtered by what NVRTC can target.
std::vector<std::string> ValidArchs();
// The CUDA header directories passed to NVRTC as --include-path (for cuda_bf16.h and friends):
// $DFLASH_CUDA_INCLUDE when set and non-empty, else the toolkit's include directories found by CMake at build
// time; either may list several directories separated by ';' or ':'.
std::vector<std::string> CudaIncludeDirs();

// Hash (hex SHA-256) of everything that goes into code generation besides the toolchain and arch: every
// embedded file (name and bytes, sorted by name), the main file, the defines, the name expressions and the
// options. Any single change to those changes the hash.
std::string SourceHash(std::span<const EmbeddedFile> sources, const CompileSpec& spec);
// The NVRTC options used for `arch` (including -arch=sm_XX, -std=c++17, include path, --ptxas-options=-v, and
// --no-cache on NVRTC 12.9+, whose compile cache would skip ptxas and so drop the resource report).
std::vector<std::string> CompileOptionsFor(std::string_view arch, const CompileSpec& spec);

// Compiles spec.main_file (with the other embedded files available as includes) for `arch`.
// CompileError status carries the log; `label` names the family and variant in messages. Internal when the
// log lacks the ptxas report of a name expression's kernel (the resources are then unknown).
Result<CompiledVariant> CompileVariant(std::span<const EmbeddedFile> sources, const CompileSpec& spec,
                                       std::string_view arch, std::string_view label);

// Parses ptxas "-v" output (the "Compiling entry function '...'", "Used N registers, ..." and
// "N bytes stack frame, N bytes spill stores, N bytes spill loads" lines) into per-kernel usage.
std::map<std::string, ResourceUsage> ParsePtxasReport(std::string_view log);

}  // namespace dflash::tuner
