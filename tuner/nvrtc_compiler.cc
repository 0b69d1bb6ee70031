// NVRTC compile of one variant to a cubin: the RAII program, options, lowering, source hash, ptxas report.
#include "tuner/nvrtc_compiler.h"

#include <nvrtc.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <utility>

#include "base/sha256.h"
#include "cache/cubin_elf.h"
#include "tuner/arch_limits.h"

#ifndef DFLASH_CUDA_INCLUDE_DIR
#error "DFLASH_CUDA_INCLUDE_DIR must be defined by the build (the CUDA toolkit's include directory)"
#endif

namespace dflash::tuner {
namespace {

constexpr int kLogLinesInError = 40;

// Move-only owner of an nvrtcProgram.
class NvrtcProgram {
 public:
  static Result<NvrtcProgram> Create(const std::string& source, const std::string& name,
                                     const std::vector<const char*>& header_texts,
                                     const std::vector<const char*>& header_names) {
    nvrtcProgram p = nullptr;
    nvrtcResult r = nvrtcCreateProgram(&p, source.c_str(), name.c_str(), static_cast<int>(header_texts.size()),
                                       header_texts.data(), header_names.data());
    if (r != NVRTC_SUCCESS) {
      return Status(ErrorCode::kCompileError,
                    std::string("nvrtcCreateProgram failed for ") + name + ": " + nvrtcGetErrorString(r));
    }
    return NvrtcProgram(p);
  }
  NvrtcProgram(NvrtcProgram&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  NvrtcProgram& operator=(NvrtcProgram&& o) noexcept {
    if (this != &o) {
      Reset();
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  NvrtcProgram(const NvrtcProgram&) = delete;
  NvrtcProgram& operator=(const NvrtcProgram&) = delete;
  ~NvrtcProgram() { Reset(); }
  nvrtcProgram get() const { return p_; }

 private:
  explicit NvrtcProgram(nvrtcProgram p) : p_(p) {}
  void Reset() {
    if (p_ != nullptr) nvrtcDestroyProgram(&p_);
    p_ = nullptr;
  }
  nvrtcProgram p_ = nullptr;
};

Status NvrtcError(nvrtcResult r, std::string_view call, std::string_view label) {
  return Status(ErrorCode::kCompileError,
                std::string(call) + " failed for " + std::string(label) + ": " + nvrtcGetErrorString(r));
}

std::string ProgramLog(nvrtcProgram p) {
  std::size_t size = 0;
  if (nvrtcGetProgramLogSize(p, &size) != NVRTC_SUCCESS || size == 0) return {};
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(p, log.data()) != NVRTC_SUCCESS) return {};
  while (!log.empty() && log.back() == '\0') log.pop_back();
  return log;
}

std::string FirstLines(std::string_view text, int max_lines) {
  std::size_t pos = 0;
  for (int i = 0; i < max_lines && pos < text.size(); ++i) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) return std::string(text);
    pos = nl + 1;
  }
  std::string out(text.substr(0, pos));
  if (pos < text.size()) out += "... (log truncated)\n";
  return out;
}

const std::vector<int>& NvrtcSupportedArchs() {
  static const std::vector<int> archs = [] {
    std::vector<int> out;
    int n = 0;
    if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return out;
    out.resize(static_cast<std::size_t>(n));
    if (nvrtcGetSupportedArchs(out.data()) != NVRTC_SUCCESS) out.clear();
    return out;
  }();
  return archs;
}

bool NvrtcHasCompileCache() {
  static const bool has = [] {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return false;
    return major > 12 || (major == 12 && minor >= 9);
  }();
  return has;
}

std::vector<std::string> SplitPaths(std::string_view list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t end = list.find_first_of(";:", start);
    if (end == std::string_view::npos) end = list.size();
    if (end > start) out.emplace_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}


// ---- ptxas report parsing ----

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The integer that ends `s` ("... 756" -> 756); a "a+b" sum is added up (old ptxas wrote "8+0 bytes smem").
bool TrailingNumber(std::string_view s, long long* out) {
  s = Trim(s);
  std::size_t start = s.size();
  while (start > 0 && ((s[start - 1] >= '0' && s[start - 1] <= '9') || s[start - 1] == '+')) --start;
  std::string_view num = s.substr(start);
  if (num.empty()) return false;
  long long total = 0;
  bool any = false;
  std::size_t pos = 0;
  while (pos <= num.size()) {
    std::size_t plus = num.find('+', pos);
    if (plus == std::string_view::npos) plus = num.size();
    std::string_view part = num.substr(pos, plus - pos);
    if (!part.empty()) {
      long long v = 0;
      auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
      if (ec != std::errc() || ptr != part.data() + part.size()) return false;
      total += v;
      any = true;
    }
    pos = plus + 1;
  }
  if (!any) return false;
  *out = total;
  return true;
}

int ClampInt(long long v) { return static_cast<int>(std::clamp<long long>(v, 0, 0x7fffffff)); }

// Applies one comma-separated item of a "Used ..." or "... stack frame ..." line.
void ApplyItem(std::string_view item, ResourceUsage* u) {
  item = Trim(item);
  auto before = [&](std::string_view suffix, long long* v) {
    if (item.size() < suffix.size() || item.substr(item.size() - suffix.size()) != suffix) return false;
    return TrailingNumber(item.substr(0, item.size() - suffix.size()), v);
  };
  long long v = 0;
  if (item.rfind("Used ", 0) == 0 && before(" registers", &v)) {
    u->registers = ClampInt(v);
  } else if (before(" bytes smem", &v)) {
    u->shared_bytes = ClampInt(v);
  } else if (before(" bytes stack frame", &v)) {
    u->stack_frame = ClampInt(v);
  } else if (before(" bytes spill stores", &v)) {
    u->spill_stores = ClampInt(v);
  } else if (before(" bytes spill loads", &v)) {
    u->spill_loads = ClampInt(v);
  } else if (item.size() > 1 && item.back() == ']') {
    std::size_t pos = item.rfind(" bytes cmem[");
    if (pos != std::string_view::npos && TrailingNumber(item.substr(0, pos), &v)) {
      u->constant_bytes = ClampInt(u->constant_bytes + v);
    }
  }
}

void ApplyItems(std::string_view list, ResourceUsage* u) {
  std::size_t pos = 0;
  while (pos <= list.size()) {
    std::size_t comma = list.find(',', pos);
    if (comma == std::string_view::npos) comma = list.size();
    ApplyItem(list.substr(pos, comma - pos), u);
    pos = comma + 1;
  }
}

// The text after "<tag>" in a "ptxas info    : <tag>..." line, or nullopt.
std::optional<std::string_view> AfterTag(std::string_view line, std::string_view tag) {
  std::size_t pos = line.find(tag);
  if (pos == std::string_view::npos) return std::nullopt;
  return line.substr(pos + tag.size());
}

}  // namespace

std::string NvrtcVersion() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

bool IsValidArch(std::string_view arch) {
  int n = cache::ArchToSm(std::string(arch));
  if (n < 0 || !LimitsFor(arch).has_value()) return false;
  const auto& supported = NvrtcSupportedArchs();
  return std::find(supported.begin(), supported.end(), n) != supported.end();
}

std::vector<std::string> ValidArchs() {
  std::vector<std::string> out;
  for (const ArchLimits& l : AllArchLimits()) {
    if (IsValidArch(l.arch)) out.push_back(l.arch);
  }
  return out;
}

std::vector<std::string> CudaIncludeDirs() {
  const char* env = std::getenv("DFLASH_CUDA_INCLUDE");
  if (env != nullptr && *env != '\0') return SplitPaths(env);
  return SplitPaths(DFLASH_CUDA_INCLUDE_DIR);
}

std::string SourceHash(std::span<const EmbeddedFile> sources, const CompileSpec& spec) {
  std::vector<std::pair<std::string_view, std::string_view>> files;
  files.reserve(sources.size());
  for (const EmbeddedFile& f : sources) files.emplace_back(f.name == nullptr ? "" : f.name, f.text());
  std::sort(files.begin(), files.end());
  Sha256Builder h;
  h.Field("dflash-source-hash-v1");
  h.Field(std::to_string(files.size()));
  for (const auto& [name, text] : files) {
    h.Field(name);
    h.Field(text);
  }
  h.Field(spec.main_file);
  h.Field(std::to_string(spec.defines.size()));
  for (const auto& [name, value] : spec.defines) {
    h.Field(name);
    h.Field(value);
  }
  h.Field(std::to_string(spec.name_expressions.size()));
  for (const std::string& e : spec.name_expressions) h.Field(e);
  h.Field(std::to_string(spec.options.size()));
  for (const std::string& o : spec.options) h.Field(o);
  return h.HexDigest();
}

std::vector<std::string> CompileOptionsFor(std::string_view arch, const CompileSpec& spec) {
  std::vector<std::string> opts;
  opts.push_back("-arch=" + std::string(arch));
  opts.push_back("-std=c++17");
  for (const std::string& dir : CudaIncludeDirs()) opts.push_back("--include-path=" + dir);
  opts.push_back("--ptxas-options=-v");
  // NVRTC 12.9+ caches compiles through the driver's compute cache when a driver is present: a hit skips ptxas,
  // so the "-v" report (registers, shared memory, spills) is missing and pruning would be blind. Our own cache
  // is the cache; NVRTC's is turned off.
  if (NvrtcHasCompileCache()) opts.push_back("--no-cache");
  for (const auto& [name, value] : spec.defines) {
    opts.push_back(value.empty() ? "-D" + name : "-D" + name + "=" + value);
  }
  for (const std::string& o : spec.options) opts.push_back(o);
  return opts;
}

Result<CompiledVariant> CompileVariant(std::span<const EmbeddedFile> sources, const CompileSpec& spec,
                                       std::string_view arch, std::string_view label) {
  const auto start = std::chrono::steady_clock::now();
  if (!IsValidArch(arch)) {
    return Unsupported("cannot compile " + std::string(label) + " for '" + std::string(arch) +
                       "': not an arch this NVRTC " + NvrtcVersion() + " and the limits table both know");
  }
  const EmbeddedFile* main = nullptr;
  std::vector<const char*> header_texts, header_names;
  for (const EmbeddedFile& f : sources) {
    if (f.name == nullptr || f.data == nullptr) {
      return InvalidArgument("embedded source without a name or data in " + std::string(label));
    }
    if (spec.main_file == f.name) main = &f;
    header_texts.push_back(f.data);  // every file is includable, the main one too
    header_names.push_back(f.name);
  }
  if (main == nullptr) {
    return NotFound("main file '" + spec.main_file + "' of " + std::string(label) + " is not among its sources");
  }
  // NVRTC reads the source as a C string: it must hold exactly the embedded bytes.
  const std::string source(main->text());
  DFLASH_ASSIGN_OR_RETURN(NvrtcProgram program,
                          NvrtcProgram::Create(source, spec.main_file, header_texts, header_names));
  for (const std::string& e : spec.name_expressions) {
    nvrtcResult r = nvrtcAddNameExpression(program.get(), e.c_str());
    if (r != NVRTC_SUCCESS) return NvrtcError(r, "nvrtcAddNameExpression(" + e + ")", label);
  }

  const std::vector<std::string> options = CompileOptionsFor(arch, spec);
  std::vector<const char*> option_ptrs;
  option_ptrs.reserve(options.size());
  for (const std::string& o : options) option_ptrs.push_back(o.c_str());

  nvrtcResult compiled = nvrtcCompileProgram(program.get(), static_cast<int>(option_ptrs.size()), option_ptrs.data());
  CompiledVariant out;
  out.arch = std::string(arch);
  out.log = ProgramLog(program.get());
  if (compiled != NVRTC_SUCCESS) {
    return Status(ErrorCode::kCompileError, "compiling " + std::string(label) + " for " + std::string(arch) +
                                                " failed (" + nvrtcGetErrorString(compiled) + "):\n" +
                                                FirstLines(out.log, kLogLinesInError));
  }

  std::size_t cubin_size = 0;
  nvrtcResult r = nvrtcGetCUBINSize(program.get(), &cubin_size);
  if (r != NVRTC_SUCCESS) return NvrtcError(r, "nvrtcGetCUBINSize", label);
  if (cubin_size == 0) return Internal("NVRTC produced an empty cubin for " + std::string(label));
  out.cubin.resize(cubin_size);
  r = nvrtcGetCUBIN(program.get(), reinterpret_cast<char*>(out.cubin.data()));
  if (r != NVRTC_SUCCESS) return NvrtcError(r, "nvrtcGetCUBIN", label);

  for (const std::string& e : spec.name_expressions) {
    const char* lowered = nullptr;
    r = nvrtcGetLoweredName(program.get(), e.c_str(), &lowered);
    if (r != NVRTC_SUCCESS || lowered == nullptr) return NvrtcError(r, "nvrtcGetLoweredName(" + e + ")", label);
    out.lowered_names[e] = lowered;  // copied: the pointer dies with the program
  }
  out.resources = ParsePtxasReport(out.log);
  for (const auto& [expr, lowered] : out.lowered_names) {
    if (out.resources.count(lowered) == 0) {
      return Internal("no ptxas resource report for " + expr + " (" + lowered + ") in the log of " +
                      std::string(label) + " for " + std::string(arch) + ":\n" + FirstLines(out.log, kLogLinesInError));
    }
  }
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::map<std::string, ResourceUsage> ParsePtxasReport(std::string_view log) {
  std::map<std::string, ResourceUsage> functions;  // every function with a report, entries or not
  std::vector<std::string> entries;
  std::string current_entry;       // the "Used ..." line belongs to the entry being compiled
  std::string current_properties;  // the "... stack frame ..." line belongs to the named function
  std::size_t pos = 0;
  while (pos < log.size()) {
    std::size_t nl = log.find('\n', pos);
    if (nl == std::string_view::npos) nl = log.size();
    std::string_view line = Trim(log.substr(pos, nl - pos));
    pos = nl + 1;

    if (auto rest = AfterTag(line, "Compiling entry function '")) {
      std::size_t q = rest->find('\'');
      if (q == std::string_view::npos) continue;
      current_entry = std::string(rest->substr(0, q));
      current_properties.clear();
      functions.try_emplace(current_entry);
      entries.push_back(current_entry);
    } else if (auto rest = AfterTag(line, "Function properties for ")) {
      std::string_view name = Trim(*rest);
      if (name.size() >= 2 && name.front() == '\'' && name.back() == '\'') name = name.substr(1, name.size() - 2);
      current_properties = std::string(name);
      functions.try_emplace(current_properties);
    } else if (line.find("bytes stack frame") != std::string_view::npos) {
      if (current_properties.empty()) continue;
      std::size_t start = line.find_first_of("0123456789");
      if (start == std::string_view::npos) continue;
      ApplyItems(line.substr(start), &functions[current_properties]);
    } else if (auto rest = AfterTag(line, ": Used ")) {
      if (current_entry.empty()) continue;
      ApplyItems("Used " + std::string(*rest), &functions[current_entry]);
    }
  }
  std::map<std::string, ResourceUsage> out;
  for (const std::string& e : entries) out[e] = functions[e];
  return out;
}

}  // namespace dflash::tuner
