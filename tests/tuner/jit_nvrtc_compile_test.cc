// NVRTC compiles of a templated bf16 kernel for every arch: cubin, lowered names, resources, errors, re-entrancy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <thread>

#include "jit_test_sources.h"
#include "tuner/arch_limits.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/thread_pool.h"

namespace dflash::tuner {
namespace {

using testing::AxpySpec;
using testing::kAxpySources;

TEST(Nvrtc, VersionIs13_0) { EXPECT_EQ(NvrtcVersion(), "13.0"); }

TEST(Nvrtc, ValidArchsCoverTheRequiredOnesAndRejectOthers) {
  std::vector<std::string> archs = ValidArchs();
  for (const char* required : {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_120", "sm_121"}) {
    EXPECT_TRUE(IsValidArch(required)) << required;
    EXPECT_NE(std::find(archs.begin(), archs.end(), required), archs.end()) << required;
  }
  for (const char* bad : {"", "sm_", "sm_a", "sm_70", "sm_120a", "sm_90aa", "sm_120f", "compute_90", "SM_90", "sm_1200", "sm_88",
                          "sm_-90", "sm_ 90", "90"}) {
    EXPECT_FALSE(IsValidArch(bad)) << bad;
  }
}

TEST(Nvrtc, OptionsHoldArchStdIncludePtxasVerboseDefinesAndExtras) {
  CompileSpec spec = AxpySpec();
  spec.defines.push_back({"FLAG_ONLY", ""});
  spec.options = {"-lineinfo"};
  std::vector<std::string> o = CompileOptionsFor("sm_120", spec);
  auto has = [&](const std::string& s) { return std::find(o.begin(), o.end(), s) != o.end(); };
  EXPECT_TRUE(has("-arch=sm_120"));
  EXPECT_TRUE(has("-std=c++17"));
  EXPECT_TRUE(has("--ptxas-options=-v"));
  EXPECT_TRUE(has("-DAXPY_SCALE=2.0f"));
  EXPECT_TRUE(has("-DFLAG_ONLY"));
  EXPECT_TRUE(has("-lineinfo"));
  EXPECT_FALSE(has("-default-device"));
  EXPECT_TRUE(has("--no-cache")) << "NVRTC 13's compile cache would skip ptxas and drop the -v report";
  ASSERT_FALSE(CudaIncludeDirs().empty());
  EXPECT_TRUE(has("--include-path=" + CudaIncludeDirs().front()));
}

TEST(Nvrtc, IncludeDirOverrideFromEnvironment) {
  const char* old = std::getenv("DFLASH_CUDA_INCLUDE");
  std::string saved = old ? old : "";
  ASSERT_EQ(setenv("DFLASH_CUDA_INCLUDE", "/opt/a/include;/opt/b/include", 1), 0);
  EXPECT_EQ(CudaIncludeDirs(), (std::vector<std::string>{"/opt/a/include", "/opt/b/include"}));
  // The override really reaches NVRTC: cuda_bf16.h is not found in a directory without it.
  ASSERT_EQ(setenv("DFLASH_CUDA_INCLUDE", "/nonexistent-dflash-include", 1), 0);
  Result<CompiledVariant> r = CompileVariant(kAxpySources, AxpySpec(), "sm_90", "axpy[env]");
  if (old) setenv("DFLASH_CUDA_INCLUDE", saved.c_str(), 1); else unsetenv("DFLASH_CUDA_INCLUDE");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kCompileError);
  EXPECT_NE(r.status().message().find("cuda_bf16.h"), std::string::npos) << r.status().message();
}

void ExpectGoodAxpyCubin(const CompiledVariant& v, const std::string& arch) {
  EXPECT_EQ(v.arch, arch);
  testing::ElfHeader elf = testing::ReadElfHeader(v.cubin);
  ASSERT_TRUE(elf.is_elf64) << arch;
  EXPECT_EQ(elf.machine, 190) << "EM_CUDA expected for " << arch;
  EXPECT_EQ(elf.sm(), testing::ArchNumber(arch)) << arch << " flags 0x" << std::hex << elf.flags;
  ASSERT_EQ(v.lowered_names.size(), 2u);
  for (const std::string& expr : AxpySpec().name_expressions) {
    auto it = v.lowered_names.find(expr);
    ASSERT_NE(it, v.lowered_names.end()) << expr;
    EXPECT_EQ(it->second.rfind("_Z", 0), 0u) << "not a mangled name: " << it->second;
    EXPECT_TRUE(testing::Contains(v.cubin, it->second)) << it->second << " not in the cubin for " << arch;
    auto res = v.resources.find(it->second);
    ASSERT_NE(res, v.resources.end()) << "no ptxas report for " << it->second << " on " << arch << "\n" << v.log;
    EXPECT_GT(res->second.registers, 0);
    EXPECT_LE(res->second.registers, 255);
    EXPECT_EQ(res->second.spill_stores, 0);
    EXPECT_EQ(res->second.spill_loads, 0);
  }
  // staged[kBlock] floats: the static shared memory ptxas reports is exactly the array.
  EXPECT_EQ(v.resources.at(v.lowered_names.at("axpy_bf16<128, 2>")).shared_bytes, 128 * 4);
  EXPECT_EQ(v.resources.at(v.lowered_names.at("axpy_bf16<256, 1>")).shared_bytes, 256 * 4);
  EXPECT_NE(v.log.find("ptxas info"), std::string::npos) << "the -v report must land in the program log";
  EXPECT_GT(v.compile_ms, 0.0);
}

TEST(Nvrtc, CompilesTheTemplatedBf16KernelForEveryArchInTheTable) {
  std::vector<std::string> archs = ValidArchs();
  ASSERT_GE(archs.size(), 7u);
  for (const std::string& arch : archs) {
    Result<CompiledVariant> r = CompileVariant(kAxpySources, AxpySpec(), arch, "axpy[test]");
    ASSERT_TRUE(r.ok()) << arch << ": " << r.status().ToString();
    ExpectGoodAxpyCubin(*r, arch);
  }
}

TEST(Nvrtc, RepeatedCompilesOfOneVariantAllCarryTheResourceReport) {
  // With a driver present, NVRTC 12.9+ would serve repeats from its cache without running ptxas.
  for (int i = 0; i < 3; ++i) {
    Result<CompiledVariant> r = CompileVariant(kAxpySources, AxpySpec(), "sm_90", "axpy[repeat]");
    ASSERT_TRUE(r.ok()) << "compile " << i << ": " << r.status().ToString();
    ExpectGoodAxpyCubin(*r, "sm_90");
  }
}

TEST(Nvrtc, DefinesReachTheCompiler) {
  CompileSpec no_define = AxpySpec();
  no_define.defines.clear();
  Result<CompiledVariant> r = CompileVariant(kAxpySources, no_define, "sm_120", "axpy[no-define]");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("AXPY_SCALE must be defined"), std::string::npos) << r.status().message();

  CompileSpec other = AxpySpec();
  other.defines = {{"AXPY_SCALE", "3.0f"}};
  Result<CompiledVariant> a = CompileVariant(kAxpySources, AxpySpec(), "sm_120", "axpy[2]");
  Result<CompiledVariant> b = CompileVariant(kAxpySources, other, "sm_120", "axpy[3]");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->cubin, b->cubin);
}

TEST(Nvrtc, SyntaxErrorIsACompileErrorWithLabelAndLog) {
  static constexpr char kBroken[] = "#include \"common.cuh\"\n__global__ void k(float* x) { x[0] = 1.0f }\n";
  const EmbeddedFile files[] = {{"broken.cu", kBroken, sizeof(kBroken) - 1}, testing::kAxpySources[1]};
  CompileSpec spec;
  spec.main_file = "broken.cu";
  Result<CompiledVariant> r = CompileVariant(files, spec, "sm_120", "broken[x=1]");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kCompileError);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("broken[x=1]"), std::string::npos) << m;
  EXPECT_NE(m.find("sm_120"), std::string::npos) << m;
  EXPECT_NE(m.find("broken.cu(2)"), std::string::npos) << m;  // NVRTC's "file(line): error: ..."
  EXPECT_NE(m.find("error"), std::string::npos) << m;
}

TEST(Nvrtc, LongErrorLogIsCutToAboutFortyLines) {
  std::string src;
  for (int i = 0; i < 200; ++i) src += "int f" + std::to_string(i) + "() { return undeclared" + std::to_string(i) + "; }\n";
  const EmbeddedFile files[] = {{"many.cu", src.c_str(), src.size()}};
  CompileSpec spec;
  spec.main_file = "many.cu";
  Result<CompiledVariant> r = CompileVariant(files, spec, "sm_90", "many");
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  long lines = std::count(m.begin(), m.end(), '\n');
  EXPECT_GE(lines, 35);
  EXPECT_LE(lines, 45);
  EXPECT_NE(m.find("undeclared0"), std::string::npos);
  EXPECT_EQ(m.find("undeclared199"), std::string::npos);
  EXPECT_NE(m.find("truncated"), std::string::npos);
}

TEST(Nvrtc, IncludesResolveOnlyFromEmbeddedFiles) {
  static constexpr char kMain[] = "#include \"not_embedded.cuh\"\n__global__ void k() {}\n";
  const EmbeddedFile files[] = {{"main.cu", kMain, sizeof(kMain) - 1}};
  CompileSpec spec;
  spec.main_file = "main.cu";
  Result<CompiledVariant> r = CompileVariant(files, spec, "sm_90", "missing-include");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kCompileError);
  EXPECT_NE(r.status().message().find("not_embedded.cuh"), std::string::npos) << r.status().message();
}

TEST(Nvrtc, MissingMainFileIsNotFoundAndUnknownArchIsUnsupported) {
  CompileSpec spec = AxpySpec();
  spec.main_file = "nope.cu";
  Result<CompiledVariant> r = CompileVariant(kAxpySources, spec, "sm_90", "axpy");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(r.status().message().find("nope.cu"), std::string::npos);

  Result<CompiledVariant> a = CompileVariant(kAxpySources, AxpySpec(), "sm_70", "axpy");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(a.status().message().find("sm_70"), std::string::npos);
}

TEST(Nvrtc, UnknownNameExpressionIsACompileError) {
  CompileSpec spec = AxpySpec();
  spec.name_expressions.push_back("no_such_kernel<1>");
  Result<CompiledVariant> r = CompileVariant(kAxpySources, spec, "sm_90", "axpy[bad-name]");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kCompileError);
}

TEST(Nvrtc, SameVariantFromEightThreadsAtOnce) {
  Result<CompiledVariant> reference = CompileVariant(kAxpySources, AxpySpec(), "sm_120", "axpy[ref]");
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  constexpr int kThreads = 8;
  std::vector<std::optional<Result<CompiledVariant>>> results(kThreads);
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&results, t] {
        results[t].emplace(CompileVariant(kAxpySources, AxpySpec(), "sm_120", "axpy[t" + std::to_string(t) + "]"));
      });
    }
  }
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(results[t].has_value());
    const Result<CompiledVariant>& r = *results[t];
    ASSERT_TRUE(r.ok()) << "thread " << t << ": " << r.status().ToString();
    EXPECT_EQ(r->cubin, reference->cubin) << "thread " << t;
    EXPECT_EQ(r->lowered_names, reference->lowered_names);
    ExpectGoodAxpyCubin(*r, "sm_120");
  }
}

TEST(Nvrtc, EveryArchCompiledInParallelOnAPoolMatchesTheSerialCompile) {
  std::vector<std::string> archs = ValidArchs();
  ThreadPool pool(4);
  std::vector<std::future<Result<CompiledVariant>>> futures;
  for (const std::string& arch : archs) {
    futures.push_back(pool.Submit([arch] { return CompileVariant(kAxpySources, AxpySpec(), arch, "axpy[pool]"); }));
  }
  for (std::size_t i = 0; i < archs.size(); ++i) {
    Result<CompiledVariant> parallel = futures[i].get();
    ASSERT_TRUE(parallel.ok()) << archs[i] << ": " << parallel.status().ToString();
    Result<CompiledVariant> serial = CompileVariant(kAxpySources, AxpySpec(), archs[i], "axpy[serial]");
    ASSERT_TRUE(serial.ok());
    EXPECT_EQ(parallel->cubin, serial->cubin) << archs[i];
    ExpectGoodAxpyCubin(*parallel, archs[i]);
  }
}

}  // namespace
}  // namespace dflash::tuner
