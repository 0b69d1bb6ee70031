#include "sass_check.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace dflash::testing {

Result<std::string> DisassembleCubin(const std::vector<std::uint8_t>& cubin) {
  const std::string nvdisasm = DFLASH_NVDISASM;
  if (nvdisasm.empty() || nvdisasm.find("NOTFOUND") != std::string::npos || !std::filesystem::exists(nvdisasm))
    return Unsupported("nvdisasm not found (neither in the CUDA toolkit nor from tools/scripts/install-deps.sh): "
                       "run tools/scripts/install-deps.sh and reconfigure");
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("dflash-sass-" + std::to_string(getpid()) + "-" +
                                               std::to_string(reinterpret_cast<std::uintptr_t>(&cubin)) + ".cubin");
  {
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(cubin.data()), static_cast<std::streamsize>(cubin.size()));
    if (!out) return Internal("cannot write " + file.string());
  }
  const std::string cmd = "'" + nvdisasm + "' -c '" + file.string() + "' 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return Internal("cannot run " + cmd);
  std::string text;
  std::array<char, 65536> buf;
  for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0;) text.append(buf.data(), n);
  const int rc = pclose(pipe);
  std::filesystem::remove(file);
  if (rc != 0) return Internal("nvdisasm failed: " + text.substr(0, 500));
  return text;
}

int CountInstructions(std::string_view sass, std::string_view opcode) {
  // nvdisasm -c prints "        /*0a30*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ ... ;":
  // the opcode follows the address comment (after an optional predicate "@P0 ").
  int n = 0;
  for (std::size_t pos = 0; (pos = sass.find(opcode, pos)) != std::string_view::npos; pos += opcode.size()) {
    const char before = pos > 0 ? sass[pos - 1] : ' ';
    const char after = pos + opcode.size() < sass.size() ? sass[pos + opcode.size()] : ' ';
    if ((before == ' ' || before == '\t') && (after == '.' || after == ' ')) ++n;
  }
  return n;
}

Result<std::string> Sm90aSass(const std::vector<std::uint8_t>& cubin, std::string_view arch) {
  if (arch != "sm_90a") return std::string();
  Result<std::string> sass = DisassembleCubin(cubin);
  if (!sass.ok()) return sass.status().WithContext("disassembling an sm_90a variant");
  return sass;
}

int HgmmaCount(std::string_view sm90a_sass) { return sm90a_sass.empty() ? -1 : CountInstructions(sm90a_sass, "HGMMA"); }

std::string WgmmaSerialisationAdvisory(std::string_view compile_log) {
  const std::size_t at = compile_log.find("wgmma.mma_async instructions are serialized");
  if (at == std::string_view::npos) return {};
  const std::size_t line = compile_log.rfind('\n', at);
  const std::size_t start = line == std::string_view::npos ? 0 : line + 1;
  return std::string(compile_log.substr(start, compile_log.find('\n', at) - start));
}

std::string_view FunctionSass(std::string_view sass, std::string_view lowered) {
  // nvdisasm -c heads each function with "//--------------------- .text.<mangled> -----...", and the next header
  // (another function's, or SYMBOLS) ends it.
  constexpr std::string_view kHeader = "//--------------------- ";
  const std::string head = std::string(kHeader) + ".text." + std::string(lowered) + " ";
  const std::size_t begin = sass.find(head);
  if (begin == std::string_view::npos) return {};
  const std::size_t end = sass.find(kHeader, begin + head.size());
  return sass.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin);
}

std::string RegisterSplitMismatch(std::string_view sass, std::string_view lowered, int registers, unsigned threads) {
  if (sass.empty()) return "";  // not sm_90a
  const std::string_view function = FunctionSass(sass, lowered);
  if (function.empty()) {
    return "no SASS of " + std::string(lowered) + " in the disassembly (did nvdisasm's header format change?)";
  }
  if (threads == 0 || CountInstructions(function, "USETMAXREG") == 0) return "";
  const int most = std::min(255, static_cast<int>(65536 / threads) / 8 * 8);
  if (registers == most) return "";
  return std::string(lowered) + " moves registers with setmaxnreg but launches at " + std::to_string(registers) +
         " registers a thread, not the " + std::to_string(most) + " its " + std::to_string(threads) +
         "-thread block allows: setmaxnreg.inc would wait for registers that never come free";
}

}  // namespace dflash::testing
