// Distributed training on the GPU backend (trainer/nccl_collective.h): two processes on the
// one GPU, made to look like two hosts (different NCCL_HOSTID), so NCCL routes their
// all-reduces through the network plugin (docs/gpu.md). They must end with the same bits,
// equal single-process GPU training within the distributed tolerance, and NCCL's own log
// must show the encrypted plugin carrying the traffic. A rank with another job key must
// make both fail. Skips without a GPU (scripts/gpu-check runs it on one); the refusal of a
// network other than the plugin runs everywhere the build has CUDA.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "enclave/kernels/chunk_open.h"
#include "enclave/net/plugin.h"
#include "enclave/trainer/data.h"
#include "enclave/trainer/job.h"
#include "enclave/trainer/nccl_collective.h"
#include "enclave/trainer/rng.h"
#include "enclave/trainer/trainer.h"

namespace enclave::trainer {
namespace {

namespace fs = std::filesystem;

TEST(NcclCollectiveTest, RefusesANetworkOtherThanThePlugin) {
  if (!NcclBuilt()) GTEST_SKIP() << "built without CUDA: no NCCL";
  const char* vars[] = {"NCCL_NET", "NCCL_NET_PLUGIN", "NCCL_COLLNET_ENABLE", "NCCL_MNNVL_ENABLE"};
  for (const char* var : vars) unsetenv(var);
  for (const char* bad : vars) {
    setenv(bad, "1x", 1);
    const Status st = ForceNcclNetwork("enclave");
    EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
    EXPECT_NE(st.message().find(bad), std::string::npos) << st.ToString();
    for (const char* other : vars) {  // refused before anything was set
      if (other != bad) {
        EXPECT_EQ(std::getenv(other), nullptr) << other;
      }
    }
    NcclJoinOptions o;
    o.world_size = 2;
    EXPECT_EQ(JoinNccl(o).status().code(), Code::kFailedPrecondition);
    unsetenv(bad);
  }
  // Accepted: the plugin's name in any case, and the settings it forces.
  setenv("NCCL_NET", "ENCLAVE", 1);
  ASSERT_TRUE(ForceNcclNetwork("enclave").ok());
  EXPECT_STREQ(std::getenv("NCCL_NET"), "enclave");
  EXPECT_STREQ(std::getenv("NCCL_NET_PLUGIN"), "enclave");
  EXPECT_STREQ(std::getenv("NCCL_COLLNET_ENABLE"), "0");
  EXPECT_STREQ(std::getenv("NCCL_MNNVL_ENABLE"), "0");
  for (const char* var : vars) unsetenv(var);
}

class NcclGpuTraining : public ::testing::Test {
 protected:
  // CUDA does not survive a fork of a process that initialised it, so the parent never
  // touches the GPU: a child answers whether there is one.
  static bool GpuInChild() {
    const pid_t pid = fork();
    if (pid == 0) _exit(kernels::GpuAvailable() ? 0 : 1);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

  void SetUp() override {
    if (!GpuInChild()) GTEST_SKIP() << "no GPU (or built without CUDA): scripts/gpu-check runs this on one";
    char t[] = "/tmp/nccl-gpu-test-XXXXXX";
    dir_ = mkdtemp(t);
    csv_ = dir_ / "synthetic.csv";
    std::ofstream f(csv_);
    f << "a,b,c,d,e,f,y\n";
    Rng rng(21);
    for (int i = 0; i < 3000; ++i) {
      float x[6];
      for (float& v : x) v = rng.Uniform(-2.0f, 2.0f);
      const bool y = x[0] - 0.5f * x[1] + 0.25f * x[2] * x[3] + rng.Uniform(-0.3f, 0.3f) > 0;
      for (float v : x) f << v << ",";
      f << (y ? "yes" : "no") << "\n";
    }
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  JobSpec Job() const {
    const std::string text = "seed = 4\ndevice = \"gpu\"\noutput_dir = \"" + (dir_ / "out").string() +
                             "\"\n[[datasets]]\nid = \"s\"\npath = \"" + csv_.string() +
                             "\"\nformat = \"csv\"\nlabel = \"y\"\npositive = \"yes\"\n"
                             "[model]\nhidden = [32]\n[training]\nepochs = 4\nbatch_size = 64\n"
                             "[optimizer]\ntype = \"adamw\"\nlr = 0.01\n";
    auto job = ParseJob(text, "nccl-test.toml", dir_.string());
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return std::move(job).value();
  }

  // In a child process (nothing of CUDA before the fork): trains as `rank` of `world`
  // (world 1: alone), writes the parameters to rank-R.params; the exit status says how it went.
  [[noreturn]] void RunRank(int rank, int world, int id_pipe[2], uint8_t key_byte) {
    const std::string tag = dir_ / ("rank-" + std::to_string(rank));
    auto die = [&](const std::string& why) {
      std::ofstream(tag + ".error") << why << "\n";
      _exit(1);
    };
    // Rank 0 only writes the id, the others only read it: a rank 0 that dies before
    // writing gives them end-of-file, not a hang. And no rank outlives the test's budget.
    close(rank == 0 ? id_pipe[0] : id_pipe[1]);
    alarm(75);
    setenv("NCCL_HOSTID", ("enclave-test-host-" + std::to_string(rank)).c_str(), 1);
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_SUBSYS", "INIT,NET", 1);
    setenv("NCCL_DEBUG_FILE", (tag + ".nccl.log").c_str(), 1);
    std::unique_ptr<Collective> collective;
    if (world > 1) {
      uint8_t key[32];
      std::memset(key, key_byte, sizeof key);
      if (enclave_net_set_job_key(key, sizeof key) != 0) die("set key");
      NcclJoinOptions o;
      o.world_size = world;
      o.rank = rank;
      o.timeout = std::chrono::seconds(20);
      if (rank == 0) {
        if (Status st = ForceNcclNetwork("enclave"); !st.ok()) die(st.ToString());  // before NCCL runs
        auto id = NewNcclUniqueId();
        if (!id.ok()) die(id.status().ToString());
        o.unique_id = *id;
        for (int r = 1; r < world; ++r) {
          if (write(id_pipe[1], o.unique_id.data(), o.unique_id.size()) != static_cast<ssize_t>(o.unique_id.size())) die("pipe");
        }
      } else if (read(id_pipe[0], o.unique_id.data(), o.unique_id.size()) != static_cast<ssize_t>(o.unique_id.size())) {
        die("no NCCL id from rank 0 (it failed first)");
      }
      auto joined = JoinNccl(o);
      if (!joined.ok()) die(joined.status().ToString());
      collective = std::move(joined).value();
    }
    const JobSpec job = Job();
    auto be = MakeBackend(Device::kGpu);
    if (!be.ok()) die(be.status().ToString());
    auto data = LoadDatasets(**be, job.datasets, nullptr);
    if (!data.ok()) die(data.status().ToString());
    auto split = StratifiedSplit(data->labels, data->classes, job.validation_fraction, job.seed);
    if (!split.ok()) die(split.status().ToString());
    auto r = Train(**be, job, *data, *split, {}, nullptr, collective.get());
    if (!r.ok()) die(r.status().ToString());
    std::ofstream out(tag + ".params", std::ios::binary);
    out.write(reinterpret_cast<const char*>(r->params.data()), static_cast<std::streamsize>(r->params.size() * 4));
    out.close();  // _exit runs no destructors: an unclosed stream would never reach the file
    collective.reset();
    _exit(out ? 0 : 1);
  }

  // Runs `world` ranks (key_byte per rank) as child processes; returns their exit statuses.
  std::vector<int> RunRanks(int world, const std::vector<uint8_t>& key_bytes) {
    int id_pipe[2];
    EXPECT_EQ(pipe(id_pipe), 0);
    std::vector<pid_t> pids;
    for (int r = 0; r < world; ++r) {
      const pid_t pid = fork();
      if (pid == 0) RunRank(r, world, id_pipe, key_bytes[r]);
      pids.push_back(pid);
    }
    close(id_pipe[0]);
    close(id_pipe[1]);
    std::vector<int> codes;
    for (pid_t pid : pids) {
      int status = 0;
      waitpid(pid, &status, 0);
      codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
    return codes;
  }

  std::vector<float> Params(int rank) const {
    std::ifstream f(dir_ / ("rank-" + std::to_string(rank) + ".params"), std::ios::binary);
    std::vector<float> p;
    float v;
    while (f.read(reinterpret_cast<char*>(&v), sizeof v)) p.push_back(v);
    return p;
  }
  std::string Slurp(const std::string& name) const {
    std::ifstream f(dir_ / name);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  std::string AllNcclLogs() const {
    std::string all;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename().string().find(".nccl.log") != std::string::npos) all += Slurp(e.path().filename());
    }
    return all;
  }

  fs::path dir_, csv_;
};

TEST_F(NcclGpuTraining, TwoRanksThroughThePluginEqualOneProcess) {
  auto single = RunRanks(1, {0});
  ASSERT_EQ(single[0], 0) << Slurp("rank-0.error");
  const std::vector<float> alone = Params(0);
  fs::remove(dir_ / "rank-0.params");
  auto codes = RunRanks(2, {7, 7});
  ASSERT_EQ(codes[0], 0) << Slurp("rank-0.error");
  ASSERT_EQ(codes[1], 0) << Slurp("rank-1.error");
  const std::vector<float> p0 = Params(0), p1 = Params(1);
  ASSERT_EQ(p0.size(), alone.size());
  ASSERT_GT(p0.size(), 0u);
  EXPECT_EQ(std::memcmp(p0.data(), p1.data(), p0.size() * sizeof(float)), 0) << "the ranks differ";
  double worst = 0;
  for (size_t i = 0; i < alone.size(); ++i) {
    worst = std::max(worst, std::fabs(double{p0[i]} - alone[i]) / std::max(1.0, std::fabs(double{alone[i]})));
  }
  std::printf("2 GPU ranks through NCCL vs one GPU process: worst parameter difference %.3g (tolerance 1e-5)\n", worst);
  EXPECT_LE(worst, 1e-5);
  // NCCL's own log: the plugin was loaded and carried the ranks' connections.
  const std::string logs = AllNcclLogs();
  EXPECT_NE(logs.find("NET/Plugin"), std::string::npos) << logs.substr(0, 4000);
  EXPECT_NE(logs.find("via NET/enclave"), std::string::npos) << logs.substr(0, 4000);
  EXPECT_EQ(logs.find("via NET/Socket"), std::string::npos);
}

TEST_F(NcclGpuTraining, ARankWithAnotherJobKeyFailsBoth) {
  const auto t0 = std::chrono::steady_clock::now();
  auto codes = RunRanks(2, {7, 8});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(codes[0], 0);
  EXPECT_NE(codes[1], 0);
  EXPECT_FALSE(fs::exists(dir_ / "rank-0.params"));
  EXPECT_LT(secs, 60.0);
  std::printf("wrong key: both ranks failed in %.1f s: %s / %s\n", secs, Slurp("rank-0.error").c_str(),
              Slurp("rank-1.error").c_str());
}

}  // namespace
}  // namespace enclave::trainer
