// SASS of a compiled variant, for the compile tests of the Hopper tier: the cubin disassembled by nvdisasm (the CUDA
// toolkit's, else the one tools/scripts/install-deps.sh puts in the user cache; CMake finds it), the count of one
// instruction in it, the tier's HGMMA count, ptxas's advisory that it serialised the wgmma, and the register count
// a kernel that moves registers between warpgroups (setmaxnreg) must be launched at. Thread-safety:
// re-entrant (each call uses its own temporary file).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dflash::testing {

// nvdisasm's text of the cubin; an error naming what is missing when nvdisasm is not there or fails.
Result<std::string> DisassembleCubin(const std::vector<std::uint8_t>& cubin);
// How many instructions of `sass` start with `opcode` ("HGMMA" counts HGMMA.64x128x16.F32.BF16 ...).
int CountInstructions(std::string_view sass, std::string_view opcode);
// nvdisasm's text of a variant compiled for `arch` when that is sm_90a (what the Hopper tier's checks read), else
// empty; on sm_90a, DisassembleCubin's error.
Result<std::string> Sm90aSass(const std::vector<std::uint8_t>& cubin, std::string_view arch);
// The Hopper tier's HGMMA instructions in Sm90aSass's text; -1 (not counted) for an empty text (another arch).
int HgmmaCount(std::string_view sm90a_sass);
// The part of nvdisasm's text that is the function `lowered` (a mangled name), or empty when it has none.
std::string_view FunctionSass(std::string_view sass, std::string_view lowered);
// Empty for an empty `sass` (another arch) and unless `lowered`'s SASS holds USETMAXREG (setmaxnreg) and its launch
// count `registers` is not the most its block of `threads` allows (65536 / threads in steps of 8, at most 255): the
// split (producers give registers up, consumers take them) was sized for that count, and at fewer
// setmaxnreg.inc waits for registers that never come free (a hang); then the reason. A reason too when `sass`
// lacks the function, so that a change of nvdisasm's format cannot turn the check off.
std::string RegisterSplitMismatch(std::string_view sass, std::string_view lowered, int registers, unsigned threads);
// The line of the compile log where ptxas says it serialised the wgmma pipeline (each product waited for: the
// advisories C7510-C7520), or empty.
std::string WgmmaSerialisationAdvisory(std::string_view compile_log);

}  // namespace dflash::testing
