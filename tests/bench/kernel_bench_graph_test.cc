// gpu::GraphExec on a device (what kernel_bench --graph relies on): captured work does not run during capture and
// runs on every replay; a failed or uncapturable enqueue ends the capture with an error and leaves the stream usable.
// Every test skips without a GPU (label `gpu`).
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "tuner/gpu_runtime.h"

namespace dflash::gpu {
namespace {

class GraphExecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no GPU";
    auto ctx = Context::Primary(0);
    ASSERT_TRUE(ctx.ok()) << ctx.status().message();
    ctx_.emplace(std::move(*ctx));
    auto s = Stream::Create();
    ASSERT_TRUE(s.ok()) << s.status().message();
    stream_ = std::move(*s);
    auto b = DeviceBuffer::Alloc(kBytes, "graph test buffer");
    ASSERT_TRUE(b.ok()) << b.status().message();
    buf_ = std::move(*b);
  }
  std::vector<std::uint8_t> Read() {
    EXPECT_TRUE(stream_.Synchronize().ok());
    std::vector<std::uint8_t> host(kBytes);
    EXPECT_TRUE(buf_.Download(host.data(), kBytes).ok());
    return host;
  }
  static bool All(const std::vector<std::uint8_t>& v, std::uint8_t x) {
    for (std::uint8_t b : v)
      if (b != x) return false;
    return true;
  }
  static constexpr std::size_t kBytes = 1 << 20;
  std::optional<Context> ctx_;
  Stream stream_;
  DeviceBuffer buf_;
};

TEST_F(GraphExecTest, CapturedWorkRunsOnlyOnReplayAndOnEveryReplay) {
  ASSERT_TRUE(buf_.Fill(0x00, stream_.get()).ok());
  ASSERT_TRUE(stream_.Synchronize().ok());
  auto g = GraphExec::Capture(stream_.get(), [&](CUstream s) { return buf_.Fill(0x5A, s); }, "fill graph");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(All(Read(), 0x00)) << "capture must not run the work";
  ASSERT_TRUE(g->Launch(stream_.get()).ok());
  EXPECT_TRUE(All(Read(), 0x5A));
  ASSERT_TRUE(buf_.Fill(0x11, stream_.get()).ok());
  ASSERT_TRUE(g->Launch(stream_.get()).ok());
  EXPECT_TRUE(All(Read(), 0x5A)) << "a second replay runs the work again";
  GraphExec moved = std::move(*g);
  ASSERT_TRUE(buf_.Fill(0x22, stream_.get()).ok());
  ASSERT_TRUE(moved.Launch(stream_.get()).ok());
  EXPECT_TRUE(All(Read(), 0x5A));
  EXPECT_EQ(g->Launch(stream_.get()).code(), ErrorCode::kInvalidArgument) << "moved-from graph is empty";
}

TEST_F(GraphExecTest, AFailingEnqueueEndsTheCaptureWithItsError) {
  auto g = GraphExec::Capture(stream_.get(), [](CUstream) { return InvalidArgument("boom"); }, "failing graph");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("boom"), std::string::npos);
  ASSERT_TRUE(buf_.Fill(0x33, stream_.get()).ok()) << "the stream is no longer capturing";
  EXPECT_TRUE(All(Read(), 0x33));
}

TEST_F(GraphExecTest, AnUncapturableCallFailsInsteadOfRunning) {
  std::vector<std::uint8_t> host(kBytes, 0x77);
  ASSERT_TRUE(buf_.Fill(0x00, stream_.get()).ok());
  ASSERT_TRUE(stream_.Synchronize().ok());
  // A synchronous copy runs on the legacy stream, which cannot be used while a blocking stream captures.
  auto g = GraphExec::Capture(stream_.get(), [&](CUstream) { return buf_.Upload(host.data(), kBytes); }, "bad");
  EXPECT_FALSE(g.ok());
  ASSERT_TRUE(buf_.Fill(0x44, stream_.get()).ok());
  EXPECT_TRUE(All(Read(), 0x44));
}

TEST_F(GraphExecTest, TheLegacyStreamAndAnEmptyCallbackAreRejected) {
  EXPECT_EQ(GraphExec::Capture(nullptr, [](CUstream) { return Status::Ok(); }).status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(GraphExec::Capture(stream_.get(), nullptr).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace dflash::gpu
