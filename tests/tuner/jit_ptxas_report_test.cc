// ptxas "-v" report parsing: real NVRTC 13.0 logs (testdata/) and synthetic edge cases.
#include <gtest/gtest.h>

#include "jit_test_sources.h"
#include "tuner/nvrtc_compiler.h"

namespace dflash::tuner {
namespace {

constexpr char kPressure[] = "_Z8pressurePKfPfi";
constexpr char kReverseTile[] = "_Z12reverse_tileILi4096EEvPK13__nv_bfloat16PS0_";
constexpr char kLocalArray[] = "_Z11local_arrayPfPKi";
constexpr char kCallsHelper[] = "_Z12calls_helperPf";
constexpr char kHelper[] = "_Z6helperPKfi";

std::string Log(const std::string& arch) {
  std::string log = testing::ReadTestData("ptxas_" + arch + ".log");
  EXPECT_FALSE(log.empty()) << "missing test data for " << arch;
  return log;
}

TEST(PtxasReport, Sm120CapturedLog) {
  auto r = ParsePtxasReport(Log("sm_120"));
  ASSERT_EQ(r.size(), 4u) << "entries only: the device function " << kHelper << " is not a kernel";
  EXPECT_EQ(r.count(kHelper), 0u);
  const ResourceUsage& p = r.at(kPressure);
  EXPECT_EQ(p.registers, 64);
  EXPECT_EQ(p.stack_frame, 280);
  EXPECT_EQ(p.spill_stores, 516);
  EXPECT_EQ(p.spill_loads, 520);
  EXPECT_EQ(p.shared_bytes, 0);
  const ResourceUsage& t = r.at(kReverseTile);
  EXPECT_EQ(t.registers, 10);
  EXPECT_EQ(t.shared_bytes, 8192);
  EXPECT_EQ(t.spill_stores + t.spill_loads + t.stack_frame, 0);
  const ResourceUsage& l = r.at(kLocalArray);
  EXPECT_EQ(l.registers, 44);
  EXPECT_EQ(l.stack_frame, 1024);
  EXPECT_EQ(l.spill_stores + l.spill_loads, 0);
  // The helper's properties block comes after the caller's entry: it must not overwrite the caller's figures.
  const ResourceUsage& c = r.at(kCallsHelper);
  EXPECT_EQ(c.registers, 40);
  EXPECT_EQ(c.stack_frame, 128);
}

TEST(PtxasReport, Sm80CapturedLogWithConstantBanks) {
  auto r = ParsePtxasReport(Log("sm_80"));
  ASSERT_EQ(r.size(), 4u);
  const ResourceUsage& p = r.at(kPressure);
  EXPECT_EQ(p.registers, 64);
  EXPECT_EQ(p.spill_stores, 488);
  EXPECT_EQ(p.spill_loads, 488);
  EXPECT_EQ(p.stack_frame, 272);
  EXPECT_EQ(p.constant_bytes, 372);
  const ResourceUsage& t = r.at(kReverseTile);
  EXPECT_EQ(t.registers, 12);
  EXPECT_EQ(t.shared_bytes, 8192);
  EXPECT_EQ(t.constant_bytes, 368);
}

TEST(PtxasReport, Sm90CapturedLog) {
  auto r = ParsePtxasReport(Log("sm_90"));
  ASSERT_EQ(r.size(), 4u);
  EXPECT_GT(r.at(kPressure).spill_stores, 0);
  EXPECT_GT(r.at(kPressure).spill_loads, 0);
  EXPECT_EQ(r.at(kReverseTile).shared_bytes, 8192);
  EXPECT_EQ(r.at(kLocalArray).stack_frame, 1024);
}

TEST(PtxasReport, LiveNvrtcLogStillHasTheCapturedFormat) {
  std::string src = testing::ReadTestData("ptxas_capture.cu");
  ASSERT_FALSE(src.empty());
  const EmbeddedFile files[] = {{"ptxas_capture.cu", src.c_str(), src.size()}};
  CompileSpec spec;
  spec.main_file = "ptxas_capture.cu";
  spec.name_expressions = {"reverse_tile<4096>"};
  for (const std::string arch : {"sm_80", "sm_90", "sm_120"}) {
    Result<CompiledVariant> v = CompileVariant(files, spec, arch, "ptxas_capture");
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    auto captured = ParsePtxasReport(Log(arch));
    ASSERT_EQ(v->resources.size(), captured.size()) << arch;
    for (const auto& [name, usage] : captured) {
      ASSERT_EQ(v->resources.count(name), 1u) << name << " on " << arch;
      const ResourceUsage& live = v->resources.at(name);
      EXPECT_EQ(live.shared_bytes, usage.shared_bytes) << name;
      EXPECT_EQ(live.spill_stores > 0, usage.spill_stores > 0) << name;
      EXPECT_EQ(live.stack_frame > 0, usage.stack_frame > 0) << name;
      EXPECT_GT(live.registers, 0) << name;
    }
    EXPECT_EQ(v->lowered_names.at("reverse_tile<4096>"), kReverseTile);
  }
}

TEST(PtxasReport, EmptyAndUnrelatedLogsGiveNothing) {
  EXPECT_TRUE(ParsePtxasReport("").empty());
  EXPECT_TRUE(ParsePtxasReport("warning: something\nerror: else\n").empty());
  EXPECT_TRUE(ParsePtxasReport("ptxas info    : 0 bytes gmem\n").empty());
}

TEST(PtxasReport, OlderFormatWithoutBarriersCrlfAndSummedSmem) {
  // CUDA 11-era layout: no "used N barriers", "a+b bytes smem", lines ending in CRLF, unquoted names.
  const char* log =
      "ptxas info    : 0 bytes gmem\r\n"
      "ptxas info    : Compiling entry function '_Z1kPf' for 'sm_80'\r\n"
      "ptxas info    : Function properties for _Z1kPf\r\n"
      "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\r\n"
      "ptxas info    : Used 255 registers, 49152+16 bytes smem, 360 bytes cmem[0], 8 bytes cmem[2]\r\n";
  auto r = ParsePtxasReport(log);
  ASSERT_EQ(r.size(), 1u);
  const ResourceUsage& u = r.at("_Z1kPf");
  EXPECT_EQ(u.registers, 255);
  EXPECT_EQ(u.shared_bytes, 49168);
  EXPECT_EQ(u.constant_bytes, 368);
  EXPECT_EQ(u.stack_frame, 8);
  EXPECT_EQ(u.spill_stores, 4);
  EXPECT_EQ(u.spill_loads, 12);
}

TEST(PtxasReport, EntryWithoutPropertiesBlockAndWarningsInBetween) {
  const char* log =
      "ptxas warning : Value of threads per SM for entry _Z1av is out of range. .minnctapersm will be ignored\n"
      "ptxas info    : Compiling entry function '_Z1av' for 'sm_120'\n"
      "ptxas info    : Used 6 registers, used 0 barriers\n"
      "ptxas info    : Compile time = 1.000 ms\n"
      "ptxas info    : Compiling entry function 'extern_c_kernel' for 'sm_120'\n"
      "ptxas info    : Function properties for extern_c_kernel\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 1 registers, used 1 barriers, 101376 bytes smem\n";
  auto r = ParsePtxasReport(log);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r.at("_Z1av").registers, 6);
  EXPECT_EQ(r.at("_Z1av").shared_bytes, 0);
  EXPECT_EQ(r.at("extern_c_kernel").registers, 1);
  EXPECT_EQ(r.at("extern_c_kernel").shared_bytes, 101376);
}

TEST(PtxasReport, DeviceFunctionPropertiesBeforeItsCallerDoNotLeak) {
  const char* log =
      "ptxas info    : Function properties for _Z3devv\n"
      "ptxas         .     64 bytes stack frame, 32 bytes spill stores, 32 bytes spill loads\n"
      "ptxas info    : Compiling entry function '_Z4kernv' for 'sm_90'\n"
      "ptxas info    : Function properties for _Z4kernv\n"
      "ptxas         .     16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 20 registers, used 0 barriers, 80 bytes cumulative stack size\n";
  auto r = ParsePtxasReport(log);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r.at("_Z4kernv").stack_frame, 16);
  EXPECT_EQ(r.at("_Z4kernv").spill_stores, 0);
  EXPECT_EQ(r.at("_Z4kernv").registers, 20);
}

TEST(PtxasReport, MalformedLinesAreIgnoredNotMisread) {
  const char* log =
      "ptxas info    : Compiling entry function '_Z1kv\n"  // no closing quote: ignored
      "ptxas info    : Compiling entry function '_Z1av' for 'sm_90'\n"
      "ptxas info    : Function properties for _Z1av\n"
      "ptxas         .     16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 8 registers, used 0 barriers\n"
      "ptxas info    : Compiling entry function '_Z2k2v' for 'sm_90'\n"
      "ptxas info    : Used many registers, used 0 barriers, x bytes smem\n"
      // A properties line without its "Function properties for" owner belongs to no one, least of all _Z1av.
      "ptxas         .     9999999999999 bytes stack frame, 1 bytes spill stores, 2 bytes spill loads\n";
  auto r = ParsePtxasReport(log);
  ASSERT_EQ(r.size(), 2u);
  const ResourceUsage& a = r.at("_Z1av");
  EXPECT_EQ(a.registers, 8);
  EXPECT_EQ(a.stack_frame, 16);
  EXPECT_EQ(a.spill_stores, 0);
  const ResourceUsage& u = r.at("_Z2k2v");
  EXPECT_EQ(u.registers, 0);
  EXPECT_EQ(u.shared_bytes, 0);
  EXPECT_EQ(u.stack_frame, 0);
  EXPECT_EQ(u.spill_loads, 0);
}

}  // namespace
}  // namespace dflash::tuner
