// dflash-train with several ranks, as real processes on the CPU (gloo): 2 ranks x batch 1 train exactly what 1 rank
// x batch 2 trains (same rows, same anchors, global loss normalisation), a 2-rank run resumes exactly and refuses
// another world size, a killed rank makes the other exit with an error within the timeout and leaves the last
// checkpoint intact, a bad rank environment is one line and exit 2, the launcher returns a failed worker's code, the
// pipelined schedule trains what the serial one trains, and the target on another GPU (--target-device-offset)
// trains the same drafter, pipelined or in series (on the CPU: a one-line error).
// DFLASH_DIST_TEST_DEVICE=cuda runs the training tests on GPUs (NCCL, one per rank, bf16 compute, reference ops):
// the weights then agree up to bf16 non-determinism, so the test bounds the fraction of weights that differ. With 4
// GPUs, two pipelined pairs (--target-device-offset 2) train what one pair of twice the batch trains, and a killed
// pair's rank ends the other (tests/trainer/dist_gpu_check.sh runs them on the x4 kind).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "tests/process_util.h"
#include "train_test_util.h"
#include "trainer/dist/launcher.h"
#include "trainer/nn/tensor_io.h"
#include "trainer/train/train_checkpoint.h"

namespace dflash::trainer {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

pid_t Spawn(std::vector<std::string> args, const std::vector<std::string>& extra_env, const fs::path& err_file) {
  return dflash::testing::SpawnProcess(DFLASH_TRAIN_BIN, args, extra_env, "/dev/null", err_file);
}
int Wait(pid_t pid) { return dflash::testing::WaitExit(pid); }
std::string Read(const fs::path& p) { return dflash::testing::ReadText(p); }

// The complete lines of RUN/metrics.jsonl. The tests poll it while rank 0 appends: a last line without its newline
// is still being written (the JSON and the newline may land in separate writes) and is left for the next poll.
std::vector<nlohmann::json> Metrics(const fs::path& run) {
  std::vector<nlohmann::json> out;
  const std::string text = Read(run / "metrics.jsonl");
  for (std::size_t begin = 0, end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1) {
    if (end > begin) out.push_back(nlohmann::json::parse(text.substr(begin, end - begin)));
  }
  return out;
}

nn::NamedTensors Masters(const fs::path& run, int step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08d", step);
  auto t = nn::ReadAllTensors(run / "checkpoints" / name / "master.safetensors", torch::kCPU);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : nn::NamedTensors{};
}

std::string TestDevice() {
  const char* d = std::getenv("DFLASH_DIST_TEST_DEVICE");
  return d != nullptr && *d != '\0' ? d : "cpu";
}

// GPUs this process sees (0 on the CPU runs of these tests).
int VisibleGpus() { return TestDevice() == "cpu" ? 0 : static_cast<int>(torch::cuda::device_count()); }

struct Diff {
  double max = 0;          // largest |a - b|
  double fraction = 0;     // of the elements with |a - b| > 1e-4
};

Diff Compare(const nn::NamedTensors& a, const nn::NamedTensors& b) {
  EXPECT_EQ(a.size(), b.size());
  Diff d;
  std::int64_t differ = 0, total = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    const auto delta = (a[i].second.to(torch::kDouble) - b[i].second.to(torch::kDouble)).abs();
    d.max = std::max(d.max, delta.max().item<double>());
    differ += (delta > 1e-4).sum().item<std::int64_t>();
    total += delta.numel();
  }
  d.fraction = total > 0 ? double(differ) / double(total) : 0.0;
  return d;
}

// Whether two runs trained the same weights: exactly up to summation order on the CPU (fp32), up to bf16
// non-determinism on GPUs (a few elements whose tiny gradient changed sign; without the gradient all-reduce most of
// them would differ).
void ExpectSameWeights(const nn::NamedTensors& a, const nn::NamedTensors& b, const char* what) {
  const Diff d = Compare(a, b);
  std::cout << what << ": max |diff| " << d.max << ", fraction > 1e-4: " << d.fraction << "\n";
  if (TestDevice() == "cpu") {
    EXPECT_LT(d.max, 1e-5) << what;
  } else {
    EXPECT_LT(d.fraction, 1e-3) << what << " (max " << d.max << ")";
  }
}

class DistTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("dflash-dist-train-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    testing::WriteSmallTrainingSetup(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::vector<std::string> Args(const std::string& run, std::vector<std::string> extra) const {
    std::vector<std::string> a = {"--target", (root_ / "target").string(), "--drafter-config",
                                  (root_ / "drafter.json").string(), "--data", (root_ / "data.jsonl").string(),
                                  "--output", (root_ / run).string(), "--device", TestDevice(), "--kernels",
                                  "reference", "--max-length", "48",
                                  "--anchors", "8", "--seed", "5", "--threads", "1", "--lr", "3e-3", "--warmup",
                                  "0", "--save-every", "1", "--keep", "10", "--dist-timeout", "30"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  int Exec(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
           std::string* err = nullptr) {
    const fs::path err_file = root_ / "err.txt";
    const int code = Wait(Spawn(args, env, err_file));
    const std::string text = Read(err_file);
    if (err) *err = text;
    if (code != 0 && !err) ADD_FAILURE() << "exit " << code << ":\n" << text;
    return code;
  }
  void LoseRankOne(int sig, const std::vector<std::string>& extra = {});
  fs::path root_;
};

TEST_F(DistTrain, TwoRanksOfBatchOneEqualOneRankOfBatchTwoAndResumeExactly) {
  ASSERT_EQ(Exec(Args("one", {"--batch-size", "2", "--max-steps", "3"})), 0);
  std::string err;
  const int code = Exec(Args("two", {"--nproc-per-node", "2", "--batch-size", "1", "--max-steps", "3"}), {}, &err);
  if (code != 0 && err.find("no gloo backend") != std::string::npos) GTEST_SKIP() << "no gloo backend: " << err;
  ASSERT_EQ(code, 0) << err;
  EXPECT_NE(err.find("data parallel: rank 0 of 2"), std::string::npos) << err;
  EXPECT_EQ(err.find("rank 1 of 2"), std::string::npos) << "rank 1 logs: " << err;
  // The gradient all-reduce overlapped the last backward (the small drafter's gradients fit in one bucket).
  EXPECT_NE(err.find("1 bucket(s) of <= 25 MiB, 1 started during the backward"), std::string::npos) << err;
  // The same metrics (global sums) step by step, and the same weights.
  const auto m1 = Metrics(root_ / "one"), m2 = Metrics(root_ / "two");
  ASSERT_EQ(m1.size(), 3u);
  ASSERT_EQ(m2.size(), 3u);
  const double tol = TestDevice() == "cpu" ? 1e-6 : 2e-2;
  for (std::size_t s = 0; s < 3; ++s) {
    std::cout << "step " << s + 1 << ": loss " << m1[s]["loss"] << " vs " << m2[s]["loss"] << ", grad norm "
              << m1[s]["grad_norm"] << " vs " << m2[s]["grad_norm"] << "\n";
    EXPECT_NEAR(m1[s]["loss"].get<double>(), m2[s]["loss"].get<double>(), tol) << "step " << s + 1;
    EXPECT_EQ(m1[s]["tokens"], m2[s]["tokens"]);
    EXPECT_NEAR(m1[s]["grad_norm"].get<double>(), m2[s]["grad_norm"].get<double>(), tol);
  }
  const auto one = Masters(root_ / "one", 3), two = Masters(root_ / "two", 3);
  ExpectSameWeights(one, two, "1 rank x batch 2 vs 2 ranks x batch 1");
  // Training moved the weights (the comparison above is not between two untouched initialisations).
  EXPECT_GT(Compare(Masters(root_ / "one", 1), one).fraction, 0.5);

  // Resume the 2-rank run from step 2: step 3 comes out the same as without the interruption.
  const fs::path ckpts = root_ / "two" / "checkpoints";
  fs::remove_all(ckpts / "step-00000003");
  std::ofstream(ckpts / "latest") << "step-00000002\n";
  ASSERT_EQ(Exec(Args("two", {"--nproc-per-node", "2", "--batch-size", "1", "--max-steps", "3", "--resume"})), 0);
  ExpectSameWeights(Masters(root_ / "two", 3), two, "resumed vs uninterrupted");
  // Another world size cannot resume it.
  EXPECT_EQ(Exec(Args("two", {"--batch-size", "1", "--max-steps", "3", "--resume"}), {}, &err), 2);
  EXPECT_NE(err.find("written by 2 rank(s), this run has 1"), std::string::npos) << err;
}

// The pipelined schedule in every rank (--pipeline on: on the CPU the target's forward on a thread of its own) trains
// what the serial schedule trains, exactly: the features are the same, only computed ahead.
TEST_F(DistTrain, TwoPipelinedRanksTrainWhatTwoSerialRanksTrain) {
  std::string err;
  int code = Exec(Args("serial", {"--nproc-per-node", "2", "--batch-size", "2", "--max-steps", "3"}), {}, &err);
  if (code != 0 && err.find("no gloo backend") != std::string::npos) GTEST_SKIP() << "no gloo backend: " << err;
  ASSERT_EQ(code, 0) << err;
  code = Exec(Args("pipelined", {"--nproc-per-node", "2", "--batch-size", "2", "--max-steps", "3", "--pipeline",
                                 "on"}), {}, &err);
  ASSERT_EQ(code, 0) << err;
  EXPECT_NE(err.find("pipeline: the target computes the next row's features"), std::string::npos) << err;
  const Diff d = Compare(Masters(root_ / "serial", 3), Masters(root_ / "pipelined", 3));
  EXPECT_EQ(d.max, 0.0) << "pipelined and serial ranks trained different weights";
  const auto ms = Metrics(root_ / "serial"), mp = Metrics(root_ / "pipelined");
  ASSERT_EQ(ms.size(), 3u);
  ASSERT_EQ(mp.size(), 3u);
  for (std::size_t s = 0; s < 3; ++s) EXPECT_EQ(ms[s]["loss"], mp[s]["loss"]) << "step " << s + 1;
}

// Gradient accumulation: each rank's last micro-step overlaps the all-reduce, the earlier ones only accumulate.
// 2 ranks x batch 1 x 2 micro-steps train what 1 rank x batch 4 trains (up to the order of the gradient sums).
TEST_F(DistTrain, TwoRanksWithAccumulationEqualOneRankOfTheWholeBatch) {
  ASSERT_EQ(Exec(Args("one", {"--batch-size", "4", "--max-steps", "2"})), 0);
  std::string err;
  const int code = Exec(Args("two", {"--nproc-per-node", "2", "--batch-size", "1", "--grad-accum", "2",
                                     "--max-steps", "2"}), {}, &err);
  if (code != 0 && err.find("no gloo backend") != std::string::npos) GTEST_SKIP() << "no gloo backend: " << err;
  ASSERT_EQ(code, 0) << err;
  const auto m1 = Metrics(root_ / "one"), m2 = Metrics(root_ / "two");
  ASSERT_EQ(m1.size(), 2u);
  ASSERT_EQ(m2.size(), 2u);
  const double tol = TestDevice() == "cpu" ? 1e-6 : 2e-2;
  for (std::size_t s = 0; s < 2; ++s) {
    EXPECT_NEAR(m1[s]["loss"].get<double>(), m2[s]["loss"].get<double>(), tol) << "step " << s + 1;
    EXPECT_EQ(m1[s]["tokens"], m2[s]["tokens"]);
    EXPECT_NEAR(m1[s]["grad_norm"].get<double>(), m2[s]["grad_norm"].get<double>(), tol) << "step " << s + 1;
  }
  ExpectSameWeights(Masters(root_ / "one", 2), Masters(root_ / "two", 2), "1 rank x batch 4 vs 2 x 1 x accum 2");
}

// Two ranks started by hand (torchrun's environment); after a few steps rank 1 gets `sig` (SIGKILL: it dies;
// SIGSTOP: it hangs). Rank 0 must end with an error within the timeout, and the newest checkpoint must load.
void DistTrain::LoseRankOne(int sig, const std::vector<std::string>& extra) {
  constexpr int kTimeoutS = 10;
  auto port = dist::ReserveLocalPort();  // held until the test ends: rank 0 binds it only after start-up
  ASSERT_TRUE(port.ok());
  std::vector<std::string> options = {"--batch-size", "1", "--max-steps", "500"};
  options.insert(options.end(), extra.begin(), extra.end());
  auto args = Args("run", options);
  args[std::find(args.begin(), args.end(), "--dist-timeout") - args.begin() + 1] = std::to_string(kTimeoutS);
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pids.push_back(Spawn(args,
                         {"RANK=" + std::to_string(r), "WORLD_SIZE=2", "LOCAL_RANK=" + std::to_string(r),
                          "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port->port())},
                         root_ / ("err" + std::to_string(r) + ".txt")));
  }
  // Let them train a few steps (rank 0 logs them), then kill rank 1 without warning.
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  while (Metrics(root_ / "run").size() < 3 && Clock::now() < deadline) {
    int status = 0;
    if (waitpid(pids[0], &status, WNOHANG) == pids[0]) {
      kill(pids[1], SIGKILL);
      Wait(pids[1]);
      const std::string err = Read(root_ / "err0.txt");
      if (err.find("no gloo backend") != std::string::npos) GTEST_SKIP() << err;
      FAIL() << err;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(Metrics(root_ / "run").size(), 3u) << Read(root_ / "err0.txt") << Read(root_ / "err1.txt");
  ASSERT_EQ(kill(pids[1], sig), 0);
  const auto killed = Clock::now();
  const int code = Wait(pids[0]);
  const double waited = std::chrono::duration<double>(Clock::now() - killed).count();
  if (sig != SIGKILL) kill(pids[1], SIGKILL);
  EXPECT_EQ(Wait(pids[1]), 128 + SIGKILL);
  const std::string err = Read(root_ / "err0.txt");
  if (err.find("no gloo backend") != std::string::npos) GTEST_SKIP() << err;
  std::cout << "rank 0 exited with " << code << " " << waited << " s after rank 1 got signal " << sig << "\n";
  EXPECT_LT(waited, kTimeoutS + 10.0) << err;
  if (TestDevice() == "cpu") {  // gloo sees the closed connection: a clean error
    EXPECT_EQ(code, 2) << err;
    EXPECT_NE(err.find("dflash-train [rank 0]: "), std::string::npos) << err;
    EXPECT_NE(err.find("all-reduce failed"), std::string::npos) << err;
  } else {  // NCCL: an error, or its watchdog ends the process at the timeout
    EXPECT_NE(code, 0) << err;
  }
  // The newest checkpoint loads completely.
  auto latest = LatestCheckpoint(root_ / "run");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  auto masters = nn::ReadAllTensors(*latest / "master.safetensors", torch::kCPU);
  EXPECT_TRUE(masters.ok()) << masters.status().ToString();
  EXPECT_TRUE(nn::ReadAllTensors(*latest / "optimizer.safetensors", torch::kCPU).ok());
}

TEST_F(DistTrain, AKilledRankEndsTheOtherWithinTheTimeoutAndTheLastCheckpointIsIntact) { LoseRankOne(SIGKILL); }

TEST_F(DistTrain, AHungRankEndsTheOtherWithinTheTimeoutAndTheLastCheckpointIsIntact) { LoseRankOne(SIGSTOP); }

// Two pipelined pairs on 4 GPUs (drafters on cuda:0-1, targets on cuda:2-3): a rank killed mid-step ends the other
// within the timeout while its target's worker may be computing a row ahead, and the last checkpoint loads.
TEST_F(DistTrain, AKilledPairEndsTheOtherWithinTheTimeoutAndTheLastCheckpointIsIntact) {
  if (VisibleGpus() < 4) GTEST_SKIP() << "needs 4 GPUs (DFLASH_DIST_TEST_DEVICE=cuda), sees " << VisibleGpus();
  LoseRankOne(SIGKILL, {"--target-device-offset", "2"});
}

// Two pairs (--nproc-per-node 2 --target-device-offset 2, pipelined) train what one pair with batch 2 trains.
TEST_F(DistTrain, TwoPairsOfBatchOneTrainWhatOnePairOfBatchTwoTrains) {
  if (VisibleGpus() < 4) GTEST_SKIP() << "needs 4 GPUs (DFLASH_DIST_TEST_DEVICE=cuda), sees " << VisibleGpus();
  std::string err;
  ASSERT_EQ(Exec(Args("one", {"--batch-size", "2", "--max-steps", "3", "--target-device-offset", "2"}), {}, &err),
            0) << err;
  ASSERT_EQ(Exec(Args("two", {"--nproc-per-node", "2", "--batch-size", "1", "--max-steps", "3",
                              "--target-device-offset", "2"}), {}, &err), 0) << err;
  EXPECT_NE(err.find("placement: drafter on cuda:0, target on cuda:2"), std::string::npos) << err;
  EXPECT_NE(err.find("data parallel: all 2 ranks run the same kernels"), std::string::npos) << err;
  ExpectSameWeights(Masters(root_ / "one", 3), Masters(root_ / "two", 3), "1 pair x batch 2 vs 2 pairs x batch 1");
}

TEST_F(DistTrain, SigintToTheLauncherStopsEveryRankAfterOneStepWithACheckpoint) {
  auto args = Args("run", {"--nproc-per-node", "2", "--batch-size", "1", "--max-steps", "40"});
  args[std::find(args.begin(), args.end(), "--save-every") - args.begin() + 1] = "0";  // only the stop saves
  const pid_t launcher = Spawn(args, {}, root_ / "err.txt");
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  while (Metrics(root_ / "run").size() < 2 && Clock::now() < deadline) {
    int status = 0;
    if (waitpid(launcher, &status, WNOHANG) == launcher) {
      const std::string err = Read(root_ / "err.txt");
      if (err.find("no gloo backend") != std::string::npos) GTEST_SKIP() << err;
      FAIL() << err;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(kill(launcher, SIGINT), 0);
  const int code = Wait(launcher);
  const std::string err = Read(root_ / "err.txt");
  if (err.find("no gloo backend") != std::string::npos) GTEST_SKIP() << err;
  ASSERT_EQ(code, 130) << err;
  // Rank 0 saved the step every rank stopped after (the ranks agree on it through the step's all-reduce).
  auto latest = LatestCheckpoint(root_ / "run");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString() << err;
  const auto steps = Metrics(root_ / "run").size();
  char name[32];
  std::snprintf(name, sizeof name, "step-%08zu", steps);
  EXPECT_EQ(latest->filename().string(), name) << err;
  ASSERT_LT(steps, 40u);
  // Both ranks continue from it to the end.
  args.push_back("--resume");
  ASSERT_EQ(Exec(args), 0);
  EXPECT_EQ(Metrics(root_ / "run").size(), 40u);
}

// --target-device-offset: on the CPU a one-line error; on GPUs (2 or more) the target on cuda:1 and the drafter on
// cuda:0 train what both on cuda:0 train (the features move GPU to GPU, the target's ops run on its own GPU).
TEST_F(DistTrain, TargetOnAnotherGpuTrainsWhatOneGpuTrains) {
  std::string err;
  if (TestDevice() == "cpu") {
    EXPECT_EQ(Exec(Args("bad", {"--max-steps", "1", "--target-device-offset", "1"}), {}, &err), 2);
    EXPECT_NE(err.find("--target-device-offset 1 places the target on another GPU: it needs a GPU run"),
              std::string::npos) << err;
    EXPECT_EQ(Exec(Args("bad", {"--max-steps", "1", "--target-device-offset", "-1"}), {}, &err), 2);
    EXPECT_NE(err.find("--target-device-offset must be >= 0"), std::string::npos) << err;
    return;
  }
  ASSERT_EQ(Exec(Args("one", {"--batch-size", "2", "--max-steps", "3"})), 0);
  ASSERT_EQ(Exec(Args("pair", {"--batch-size", "2", "--max-steps", "3", "--target-device-offset", "1"}), {}, &err),
            0) << err;
  EXPECT_NE(err.find("placement: drafter on cuda:0, target on cuda:1"), std::string::npos) << err;
  EXPECT_NE(err.find("pipeline: the target computes the next row's features on cuda:1"), std::string::npos) << err;
  ExpectSameWeights(Masters(root_ / "one", 3), Masters(root_ / "pair", 3), "one GPU vs target on cuda:1");
  // The pair's default schedule is the pipeline; in series it trains the same weights, bit for bit.
  ASSERT_EQ(Exec(Args("serial", {"--batch-size", "2", "--max-steps", "3", "--target-device-offset", "1",
                                 "--pipeline", "off"}), {}, &err), 0) << err;
  EXPECT_EQ(Compare(Masters(root_ / "pair", 3), Masters(root_ / "serial", 3)).max, 0.0)
      << "the pipelined pair and the serial pair trained different weights";
}

TEST_F(DistTrain, BadRankEnvironmentIsOneLineAndExitTwo) {
  std::string err;
  EXPECT_EQ(Exec(Args("bad", {"--max-steps", "1"}), {"RANK=5", "WORLD_SIZE=2"}, &err), 2);
  EXPECT_EQ(err, "dflash-train: InvalidArgument: RANK=5 must be below WORLD_SIZE=2\n");
  EXPECT_EQ(Exec(Args("bad", {"--max-steps", "1"}), {"WORLD_SIZE=two"}, &err), 2);
  EXPECT_NE(err.find("WORLD_SIZE='two' is not an integer"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST_F(DistTrain, TheLauncherReturnsAFailedWorkersCode) {
  std::string err;
  EXPECT_EQ(Exec(Args("bad", {"--nproc-per-node", "2", "--rows", "bogus"}), {}, &err), 2);
  // Either rank may fail first (the launcher then stops the other before it prints): one of them reports it.
  EXPECT_TRUE(err.find("dflash-train [rank 0]: InvalidArgument: --rows bogus") != std::string::npos ||
              err.find("dflash-train [rank 1]: InvalidArgument: --rows bogus") != std::string::npos)
      << err;
  EXPECT_NE(err.find("a worker failed (exit 2)"), std::string::npos) << err;
  EXPECT_EQ(Exec(Args("bad", {"--nproc-per-node", "2"}), {"RANK=0"}, &err), 2);
  EXPECT_NE(err.find("--nproc-per-node inside a launched rank"), std::string::npos) << err;
}

}  // namespace
}  // namespace dflash::trainer
