// kernels/common/wgmma.cuh's stepped descriptors (wgmma_desc_*_stepped<ROWS>: k-step 0's descriptor plus a 32-bit
// add on the low word) against the reference form (the whole descriptor masked and shifted from the k-step's own
// address), and the fresh ones (wgmma_desc_k_major / wgmma_desc_mn_major) against it too. NVRTC, the compiler that
// builds the kernels, evaluates them at compile time for every tile start (1 KiB steps) of a 228 KiB shared window
// and every k-step of the tile shapes the families use; a static assertion that fails makes the compile fail. A
// second source with a deliberately wrong reference must not compile, so the assertions are evaluated, not skipped.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/gdn/gdn_family.h"
#include "tuner/nvrtc_compiler.h"

namespace dflash::kernels {
namespace {

// ROWS x 128 tiles (K-major: 8 k-steps over 128 columns, row0 in steps of 64 for A; MN-major: ROWS / 16 k-steps).
constexpr const char* kCheck = R"(
#include "wgmma.cuh"
using namespace dflash_ptx;
__host__ __device__ constexpr unsigned long long Reference(unsigned saddr, unsigned lbo, unsigned sbo) {
  return static_cast<unsigned long long>((saddr & 0x3FFFF) >> 4) |
         (static_cast<unsigned long long>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<unsigned long long>((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}
template <int ROWS>
__host__ __device__ constexpr bool Matches() {
  constexpr unsigned kWindow = 228 * 1024, kTileBytes = ROWS * 128 * 2;
  for (unsigned tile = 0; tile + kTileBytes <= kWindow; tile += 1024) {
    for (int row0 = 0; row0 < ROWS; row0 += 64)
      for (int kk = 0; kk < 8; ++kk) {
        const unsigned long long want =
            Reference(tile + (kk >> 2) * ROWS * 128 + row0 * 128 + (kk & 3) * 32, 16, 1024) + SKEW;
        if (wgmma_desc_k_major<ROWS>(tile, row0, kk) != want ||
            wgmma_desc_k_major_stepped<ROWS>(tile, row0, kk) != want)
          return false;
      }
    for (int kk = 0; kk < ROWS / 16; ++kk) {
      const unsigned long long want = Reference(tile + kk * 2048, ROWS * 128, 1024) + SKEW;
      if (wgmma_desc_mn_major<ROWS>(tile, kk) != want || wgmma_desc_mn_major_stepped<ROWS>(tile, kk) != want)
        return false;
    }
  }
  return true;
}
static_assert(Matches<32>() && Matches<64>() && Matches<128>() && Matches<256>(),
              "the stepped descriptors differ from the reference");
__global__ void wgmma_desc_check() {}
)";

Result<tuner::CompiledVariant> CompileCheck(const std::string& skew, std::string& text) {
  text = std::string("#define SKEW ") + skew + "\n" + kCheck;
  std::vector<EmbeddedFile> files(gdn::ChunkedForwardFamily().sources().begin(),
                                  gdn::ChunkedForwardFamily().sources().end());
  files.push_back(EmbeddedFile{"wgmma_desc_check.cu", text.c_str(), text.size()});
  tuner::CompileSpec spec;
  spec.main_file = "wgmma_desc_check.cu";
  spec.name_expressions = {"wgmma_desc_check"};
  return tuner::CompileVariant(files, spec, "sm_90a", "wgmma_desc_check");
}

TEST(WgmmaDescriptors, SteppedDescriptorsEqualTheReferenceOverTheWholeSharedWindow) {
  std::string text;
  Result<tuner::CompiledVariant> ok = CompileCheck("0", text);
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  Result<tuner::CompiledVariant> skewed = CompileCheck("1", text);  // a reference one address step off
  ASSERT_FALSE(skewed.ok()) << "the static assertion was not evaluated";
  EXPECT_NE(skewed.status().ToString().find("differ from the reference"), std::string::npos)
      << skewed.status().ToString();
}

}  // namespace
}  // namespace dflash::kernels
