// dflash-train as a real process: --help; bad input is one line on stderr and exit 2; SIGINT in the middle of a run
// saves a checkpoint and exits 130, and --resume then finishes the run from it (pipelined: the stop lands with the
// next row read ahead).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/process_util.h"
#include "train_test_util.h"
#include "trainer/train/train_checkpoint.h"

namespace dflash::trainer {
namespace {
namespace fs = std::filesystem;

struct ProcessResult {
  int code = -1;
  std::string err;
};

pid_t Spawn(std::vector<std::string> args, const fs::path& err_file) {
  return dflash::testing::SpawnProcess(DFLASH_TRAIN_BIN, args, {}, "/dev/null", err_file);
}
int Wait(pid_t pid) { return dflash::testing::WaitExit(pid); }
std::string Read(const fs::path& p) { return dflash::testing::ReadText(p); }

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("dflash-train-cli-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  ProcessResult Exec(const std::vector<std::string>& args) {
    ProcessResult r;
    r.code = Wait(Spawn(args, root_ / "err.txt"));
    r.err = Read(root_ / "err.txt");
    return r;
  }
  fs::path root_;
};

TEST_F(TrainCli, HelpAndBadInput) {
  auto help = Exec({"--help"});
  EXPECT_EQ(help.code, 0);
  auto missing = Exec({"--data", "x.jsonl", "--output", (root_ / "o").string()});
  EXPECT_EQ(missing.code, 2);
  EXPECT_EQ(missing.err.rfind("dflash-train: ", 0), 0u) << missing.err;
  EXPECT_NE(missing.err.find("--target"), std::string::npos) << missing.err;
  EXPECT_EQ(std::count(missing.err.begin(), missing.err.end(), '\n'), 1) << "one line: " << missing.err;
  EXPECT_EQ(Exec({"--preset", "huge"}).code, 2);
  EXPECT_EQ(Exec({"--rows", "sideways", "--preset", "tiny"}).code, 2);
  auto pipeline = Exec({"--pipeline", "sometimes", "--preset", "tiny"});
  EXPECT_EQ(pipeline.code, 2);
  EXPECT_NE(pipeline.err.find("--pipeline sometimes: use auto, on or off"), std::string::npos) << pipeline.err;
  EXPECT_EQ(Exec({"eval", "--target", "t"}).code, 2) << "eval needs --drafter and --prompts";
}

TEST_F(TrainCli, SigintSavesACheckpointAndResumeFinishesTheRun) {
  testing::WriteSmallTrainingSetup(root_);
  const std::vector<std::string> args = {
      "--target", (root_ / "target").string(), "--drafter-config", (root_ / "drafter.json").string(),
      "--data", (root_ / "data.jsonl").string(), "--output", (root_ / "run").string(), "--max-length", "48",
      "--anchors", "6", "--max-steps", "400", "--device", "cpu", "--threads", "1", "--log-every", "0",
      "--pipeline", "on"};  // the stop lands while the next row's features are being computed ahead
  const pid_t pid = Spawn(args, root_ / "err.txt");
  // Wait until a few steps are logged, then interrupt.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string metrics = Read(root_ / "run" / "metrics.jsonl");
    if (std::count(metrics.begin(), metrics.end(), '\n') >= 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  EXPECT_EQ(Wait(pid), 130) << Read(root_ / "err.txt");
  auto latest = LatestCheckpoint(root_ / "run");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  const std::string interrupted_at = latest->filename().string();
  EXPECT_NE(interrupted_at, "step-00000400") << "the run should have been interrupted early";

  auto resume = args;
  resume.push_back("--resume");
  auto r = Exec(resume);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("resumed from"), std::string::npos) << r.err;
  latest = LatestCheckpoint(root_ / "run");
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->filename().string(), "step-00000400");
  const std::string metrics = Read(root_ / "run" / "metrics.jsonl");
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 400) << "every step logged exactly once";
}

}  // namespace
}  // namespace dflash::trainer
