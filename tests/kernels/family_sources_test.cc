// Every registered family's embedded sources (what NVRTC compiles and what the tuning key hashes) are closed under
// their includes, so a header a kernel includes from kernels/common/ is embedded into that family, and include no
// host header; and the family's tuning and artifact keys change with every byte of the shared PTX headers
// (kernels/common/ptx.cuh, cluster.cuh), so a winner tuned with other wrappers is a miss.
#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <set>
#include <string>
#include <vector>

#include "kernels/registry.h"
#include "tuner/tuning_key.h"

namespace dflash::kernels {
namespace {

// The names of the quoted includes of a source file (`#include "name"`).
std::vector<std::string> QuotedIncludes(std::string_view text) {
  std::vector<std::string> out;
  for (std::size_t at = text.find("#include \""); at != std::string_view::npos; at = text.find("#include \"", at + 1)) {
    const std::size_t begin = at + 10, end = text.find('"', begin);
    if (end != std::string_view::npos) out.emplace_back(text.substr(begin, end - begin));
  }
  return out;
}

bool Embeds(const tuner::KernelFamily& family, std::string_view name) {
  for (const EmbeddedFile& f : family.sources())
    if (name == f.name) return true;
  return false;
}

// A family that is `inner` in every respect but one embedded file's text.
class EditedSourceFamily final : public tuner::KernelFamily {
 public:
  EditedSourceFamily(const tuner::KernelFamily& inner, std::string_view file, std::string text)
      : inner_(inner), text_(std::move(text)) {
    for (const EmbeddedFile& f : inner.sources())
      files_.push_back(file == f.name ? EmbeddedFile{f.name, text_.c_str(), text_.size()} : f);
  }
  std::string_view name() const override { return inner_.name(); }
  std::string_view summary() const override { return inner_.summary(); }
  std::span<const EmbeddedFile> sources() const override { return files_; }
  std::vector<tuner::TunableParam> params() const override { return inner_.params(); }
  Result<tuner::Problem> Bucket(const tuner::Problem& p) const override { return inner_.Bucket(p); }
  std::string InvalidReason(const tuner::Config& c, const tuner::Problem& b) const override {
    return inner_.InvalidReason(c, b);
  }
  tuner::CompileSpec MakeCompileSpec(const tuner::Config& c, const tuner::Problem& b) const override {
    return inner_.MakeCompileSpec(c, b);
  }
  BlockShape BlockShapeOf(const tuner::Config& c, const tuner::Problem& b) const override {
    return inner_.BlockShapeOf(c, b);
  }
  Result<std::unique_ptr<tuner::Workload>> MakeWorkload(const gpu::Context& ctx, const tuner::Problem& p,
                                                        std::uint64_t seed) const override {
    return inner_.MakeWorkload(ctx, p, seed);
  }

 private:
  const tuner::KernelFamily& inner_;
  std::string text_;
  std::vector<EmbeddedFile> files_;
};

TEST(FamilySources, EveryQuotedIncludeOfAFamilysSourcesIsEmbeddedInThatFamily) {
  ASSERT_FALSE(AllFamilies().empty());
  for (const tuner::KernelFamily* family : AllFamilies()) {
    std::set<std::string> names;
    for (const EmbeddedFile& f : family->sources()) EXPECT_TRUE(names.insert(f.name).second) << f.name << " twice";
    for (const EmbeddedFile& f : family->sources())
      for (const std::string& inc : QuotedIncludes(f.text()))
        EXPECT_TRUE(names.count(inc)) << family->name() << ": " << f.name << " includes \"" << inc
                                      << "\", which the family does not embed (its CMakeLists' embed list)";
  }
}

TEST(FamilySources, NoFamilysSourcesIncludeAHostHeader) {
  // NVRTC compiles the sources without the host's headers: a system include other than cuda_bf16.h (which NVRTC's
  // include path provides) would fail at run time on a machine without it.
  for (const tuner::KernelFamily* family : AllFamilies()) {
    for (const EmbeddedFile& f : family->sources()) {
      const std::string_view text = f.text();
      for (std::size_t at = text.find("#include <"); at != std::string_view::npos; at = text.find("#include <", at + 1)) {
        const std::string_view line = text.substr(at, text.find('\n', at) - at);
        EXPECT_EQ(line, "#include <cuda_bf16.h>") << family->name() << ": " << f.name;
      }
    }
  }
}

// The families that embed each shared header of kernels/common/: their keys must cover every byte of it.
void ExpectKeysCoverEveryByteOf(std::string_view header, int families_embedding_it, std::string_view which) {
  int covered = 0;
  for (const tuner::KernelFamily* family : AllFamilies()) {
    if (!Embeds(*family, header)) continue;
    ++covered;
    std::string text;
    for (const EmbeddedFile& f : family->sources())
      if (std::string_view(f.name) == header) text = f.text();
    // The sources' part of both keys does not depend on the bucket or the config: any of each will do.
    const tuner::Problem bucket = tuner::Problem::object();
    const tuner::Config config = tuner::EnumerateSpace(*family).front();
    const std::string tuning = tuner::MakeTuningKey(*family, bucket, "sm_90").source_hash;
    const std::string artifact = tuner::MakeArtifactKey(*family, config, bucket, "sm_90").source_hash;
    for (std::size_t at : {std::size_t{0}, text.size() / 2, text.size() - 1}) {
      std::string edited = text;
      edited[at] = edited[at] == ' ' ? '\t' : ' ';
      const EditedSourceFamily other(*family, header, edited);
      EXPECT_NE(tuner::MakeTuningKey(other, bucket, "sm_90").source_hash, tuning)
          << family->name() << " " << header << " byte " << at;
      EXPECT_NE(tuner::MakeArtifactKey(other, config, bucket, "sm_90").source_hash, artifact)
          << family->name() << " " << header << " byte " << at;
    }
  }
  EXPECT_EQ(covered, families_embedding_it) << which << " include kernels/common/" << header;
}

TEST(FamilySources, TheKeysOfEveryFamilyCoverEveryByteOfTheSharedPtxHeaders) {
  ExpectKeysCoverEveryByteOf("ptx.cuh", 4, "attention_fwd, attention_bwd, gdn and xent");
  ExpectKeysCoverEveryByteOf("cluster.cuh", 1, "xent");
}

}  // namespace
}  // namespace dflash::kernels
