// SourceHash: stable for equal inputs, different when any single input of code generation changes.
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "jit_test_sources.h"
#include "tuner/nvrtc_compiler.h"

namespace dflash::tuner {
namespace {

struct Inputs {
  std::vector<std::string> names{"a.cu", "b.cuh", "c.cuh"};
  std::vector<std::string> texts{"#include \"b.cuh\"\nint main_body;\n", "#define B 1\n", "#define C 2\n"};
  CompileSpec spec{"a.cu", {{"BLOCK", "128"}, {"WARPS", "4"}}, {"k<128, 4>", "k2<1>"}, {"-lineinfo"}};

  std::string Hash() const {
    std::vector<EmbeddedFile> files;
    for (std::size_t i = 0; i < names.size(); ++i) files.push_back({names[i].c_str(), texts[i].c_str(), texts[i].size()});
    return SourceHash(files, spec);
  }
};

TEST(SourceHash, IsLowercaseHexSha256AndStable) {
  Inputs in;
  std::string h = in.Hash();
  ASSERT_EQ(h.size(), 64u);
  EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos) << h;
  EXPECT_EQ(Inputs().Hash(), h);
  // Copies of the same bytes at other addresses hash alike.
  Inputs copy = in;
  EXPECT_EQ(copy.Hash(), h);
}

TEST(SourceHash, IgnoresTheOrderOfTheEmbeddedTable) {
  Inputs in;
  Inputs shuffled = in;
  std::swap(shuffled.names[0], shuffled.names[2]);
  std::swap(shuffled.texts[0], shuffled.texts[2]);
  EXPECT_EQ(shuffled.Hash(), in.Hash());
}

TEST(SourceHash, ChangesWhenAnySingleInputChanges) {
  const std::string base = Inputs().Hash();
  std::vector<std::pair<std::string, std::function<void(Inputs&)>>> mutations = {
      {"first byte of a file", [](Inputs& i) { i.texts[0][0] = '%'; }},
      {"last byte of a file", [](Inputs& i) { i.texts[1].back() = ' '; }},
      {"a byte appended to a file", [](Inputs& i) { i.texts[2] += ' '; }},
      {"a file emptied", [](Inputs& i) { i.texts[2].clear(); }},
      {"a file name", [](Inputs& i) { i.names[1] = "b2.cuh"; }},
      {"a file added", [](Inputs& i) { i.names.push_back("d.cuh"); i.texts.push_back(""); }},
      {"a file removed", [](Inputs& i) { i.names.pop_back(); i.texts.pop_back(); }},
      {"bytes moved between name and text", [](Inputs& i) { i.names[1] = "b.cuh#"; i.texts[1] = "define B 1\n"; }},
      {"bytes moved between two files", [](Inputs& i) { i.texts[1] += "#"; i.texts[2] = "define C 2\n"; }},
      {"the main file", [](Inputs& i) { i.spec.main_file = "b.cuh"; }},
      {"a define's name", [](Inputs& i) { i.spec.defines[0].first = "BLOCK_M"; }},
      {"a define's value", [](Inputs& i) { i.spec.defines[0].second = "64"; }},
      {"a define added", [](Inputs& i) { i.spec.defines.push_back({"X", ""}); }},
      {"a define removed", [](Inputs& i) { i.spec.defines.pop_back(); }},
      {"name and value split elsewhere", [](Inputs& i) { i.spec.defines[0] = {"BLOCK1", "28"}; }},
      {"the defines' order", [](Inputs& i) { std::swap(i.spec.defines[0], i.spec.defines[1]); }},
      {"a name expression", [](Inputs& i) { i.spec.name_expressions[0] = "k<128, 8>"; }},
      {"a name expression added", [](Inputs& i) { i.spec.name_expressions.push_back("k3<2>"); }},
      {"a name expression removed", [](Inputs& i) { i.spec.name_expressions.pop_back(); }},
      {"an option", [](Inputs& i) { i.spec.options[0] = "-G"; }},
      {"an option added", [](Inputs& i) { i.spec.options.push_back("-use_fast_math"); }},
      {"an option removed", [](Inputs& i) { i.spec.options.clear(); }},
      {"an option moved into the defines", [](Inputs& i) { i.spec.options.clear(); i.spec.defines.push_back({"-lineinfo", ""}); }},
  };
  std::set<std::string> seen{base};
  for (const auto& [what, mutate] : mutations) {
    Inputs in;
    mutate(in);
    std::string h = in.Hash();
    EXPECT_NE(h, base) << "hash did not change with " << what;
    EXPECT_TRUE(seen.insert(h).second) << "two different mutations collided: " << what;
  }
}

TEST(SourceHash, CoversTheRealKernelSources) {
  std::string h = SourceHash(testing::kAxpySources, testing::AxpySpec());
  std::string common = testing::kCommonCuh;
  common.back() = ' ';
  const EmbeddedFile edited[] = {testing::kAxpySources[0], {"common.cuh", common.c_str(), common.size()}};
  EXPECT_NE(SourceHash(edited, testing::AxpySpec()), h);
}

}  // namespace
}  // namespace dflash::tuner
