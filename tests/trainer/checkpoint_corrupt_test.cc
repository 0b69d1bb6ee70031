// Every validation of a safetensors header, on hand-made files: each must fail Open with a message naming the file
// and, where there is one, the tensor.
#include <gtest/gtest.h>

#include "tests/trainer/checkpoint_test_util.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/safetensors.h"
#include "trainer/checkpoint/safetensors_writer.h"

namespace dflash::trainer {
namespace {

using testing::RawSafetensors;
using testing::TempDir;
using testing::WriteFile;

class CorruptSafetensors : public ::testing::Test {
 protected:
  // Writes `bytes` as a file and opens it; returns the status.
  Status OpenRaw(const std::string& bytes) {
    WriteFile(path_, bytes);
    return SafetensorsFile::Open(path_).status();
  }
  void ExpectFails(const std::string& bytes, ErrorCode code, const std::vector<std::string>& mentions) {
    Status st = OpenRaw(bytes);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), code) << st.ToString();
    EXPECT_NE(st.message().find(path_.string()), std::string::npos) << st.message();
    for (const auto& m : mentions) EXPECT_NE(st.message().find(m), std::string::npos) << m << " in " << st.message();
  }
  TempDir dir_;
  std::filesystem::path path_ = dir_.path() / "model.safetensors";
};

constexpr char kTwo[] =
    R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[8,16]}})";

TEST_F(CorruptSafetensors, HandMadeValidFileOpens) {
  Status st = OpenRaw(RawSafetensors(kTwo, 16));
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto f = SafetensorsFile::Open(path_);
  ASSERT_TRUE(f.ok());
  std::vector<std::byte> b(8);
  ASSERT_TRUE(f->Read("b", std::span(b)).ok());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(static_cast<int>(b[i]), 8 + i);
}

TEST_F(CorruptSafetensors, ShorterThanLengthFieldIsCorruption) {
  ExpectFails(std::string("\x05\x00\x00", 3), ErrorCode::kCorruption, {"too short"});
}

TEST_F(CorruptSafetensors, HeaderLengthPastEndOfFileIsCorruption) {
  const std::string header = kTwo;
  ExpectFails(RawSafetensors(header, 16, header.size() + 17), ErrorCode::kCorruption, {"header length"});
}

TEST_F(CorruptSafetensors, HugeHeaderLengthIsCorruption) {
  ExpectFails(RawSafetensors(kTwo, 16, 1ull << 40), ErrorCode::kCorruption, {"limit"});
}

TEST_F(CorruptSafetensors, TruncatedDataIsCorruptionNamingTheTensor) {
  ExpectFails(RawSafetensors(kTwo, 12), ErrorCode::kCorruption, {"\"b\"", "truncated"});
}

TEST_F(CorruptSafetensors, TruncatedWriterOutputIsCorruption) {
  const std::vector<std::byte> data(64, std::byte{1});
  std::vector<TensorToWrite> t = {{"w", DType::kBF16, {4, 8}, std::span(data)}};
  ASSERT_TRUE(WriteSafetensors(path_, t).ok());
  std::filesystem::resize_file(path_, std::filesystem::file_size(path_) - 10);
  Status st = SafetensorsFile::Open(path_).status();
  EXPECT_EQ(st.code(), ErrorCode::kCorruption);
  EXPECT_NE(st.message().find("\"w\""), std::string::npos) << st.message();
  std::filesystem::resize_file(path_, 20);  // cut inside the header
  EXPECT_EQ(SafetensorsFile::Open(path_).status().code(), ErrorCode::kCorruption);
}

TEST_F(CorruptSafetensors, OffsetsOutOfRangeAreCorruption) {
  ExpectFails(RawSafetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[100,108]}})", 8),
              ErrorCode::kCorruption, {"\"a\"", "[100, 108]"});
}

TEST_F(CorruptSafetensors, OverlappingTensorsAreCorruption) {
  ExpectFails(RawSafetensors(
                  R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                  12),
              ErrorCode::kCorruption, {"overlaps", "\"a\"", "\"b\""});
}

TEST_F(CorruptSafetensors, TwoNamesOnTheSameBytesAreCorruption) {
  ExpectFails(RawSafetensors(
                  R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                  8),
              ErrorCode::kCorruption, {"overlaps"});
}

TEST_F(CorruptSafetensors, GapAndTrailingBytesAreCorruption) {
  ExpectFails(RawSafetensors(
                  R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
                  20),
              ErrorCode::kCorruption, {"unindexed", "\"b\""});
  ExpectFails(RawSafetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 9), ErrorCode::kCorruption,
              {"trailing"});
}

TEST_F(CorruptSafetensors, DtypeShapeMismatchWithOffsetsIsCorruption) {
  ExpectFails(RawSafetensors(R"({"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}})", 8),
              ErrorCode::kCorruption, {"\"a\"", "BF16", "[2,3]", "12 bytes", "span 8"});
}

TEST_F(CorruptSafetensors, DuplicateTensorNamesAreCorruption) {
  ExpectFails(RawSafetensors(
                  R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                  16),
              ErrorCode::kCorruption, {"\"a\" twice"});
}

TEST_F(CorruptSafetensors, UnknownDtypeIsUnsupported) {
  ExpectFails(RawSafetensors(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8), ErrorCode::kUnsupported,
              {"\"a\"", "Q4"});
}

TEST_F(CorruptSafetensors, MalformedEntriesAreCorruption) {
  const std::vector<std::string> bad = {
      "not json at all",
      R"([1,2,3])",
      R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})",
      R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})",
      R"({"a":{"dtype":"F32","data_offsets":[0,8]}})",
      R"({"a":{"shape":[2],"data_offsets":[0,8]}})",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})",
      R"({"a":"F32"})",
      R"({"__metadata__":{"format":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
      R"({"a":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,8]}})",
  };
  for (const auto& header : bad) {
    Status st = OpenRaw(RawSafetensors(header, 8));
    EXPECT_EQ(st.code(), ErrorCode::kCorruption) << header << " -> " << st.ToString();
  }
}

TEST_F(CorruptSafetensors, HeaderPaddedWithSpacesOpens) {
  std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  header.append(7, ' ');
  EXPECT_TRUE(OpenRaw(RawSafetensors(header, 8)).ok());
}

TEST_F(CorruptSafetensors, ZeroSizedTensorsAndEmptyFileOpen) {
  EXPECT_TRUE(OpenRaw(RawSafetensors(R"({"e":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]}})", 0)).ok());
  EXPECT_TRUE(OpenRaw(RawSafetensors(R"({"__metadata__":{"format":"pt"}})", 0)).ok());
}

TEST_F(CorruptSafetensors, FileTruncatedAfterOpenFailsTheReadNotTheProcess) {
  const std::vector<std::byte> data(64, std::byte{7});
  std::vector<TensorToWrite> t = {{"w", DType::kBF16, {4, 8}, std::span(data)}};
  ASSERT_TRUE(WriteSafetensors(path_, t).ok());
  auto ckpt = Checkpoint::Open(path_);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  std::filesystem::resize_file(path_, std::filesystem::file_size(path_) - 16);
  auto read = ckpt->Read("w");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), ErrorCode::kCorruption);
  EXPECT_NE(read.status().message().find("\"w\""), std::string::npos) << read.status().message();
}

TEST_F(CorruptSafetensors, CheckpointOpenPropagatesTheError) {
  WriteFile(path_, RawSafetensors(kTwo, 12));
  auto ckpt = Checkpoint::Open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), ErrorCode::kCorruption);
  EXPECT_NE(ckpt.status().message().find("model.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace dflash::trainer
