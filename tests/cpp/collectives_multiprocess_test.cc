// Cross-process collective programs: one process per replica, on a plugin whose clients span
// processes (GPU, TPU). The processes find each other through a key-value store in a shared
// directory. Set TORCH_TPU_TEST_MULTIPROCESS_PJRT_PLUGIN to such a plugin to run it (and
// TORCH_TPU_TEST_MULTIPROCESS_WORLD for more than two processes); the XLA CPU plugin has no
// multi-process clients (checked below).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "collectives/device_collectives.h"
#include "collectives_test_support.h"
#include "pjrt/error.h"
#include "pjrt_test_support.h"

namespace torch_tpu::testing {
namespace {

// A store of one file per key: enough for processes on one machine.
class DirectoryStore : public pjrt::KeyValueStore {
 public:
  explicit DirectoryStore(std::filesystem::path directory) : directory_(std::move(directory)) {}

  void Set(std::string_view key, std::string_view value) override {
    std::filesystem::path target = PathOf(key);
    std::filesystem::path temporary = target.string() + ".tmp" + std::to_string(getpid());
    {
      std::ofstream out(temporary, std::ios::binary);
      out.write(value.data(), static_cast<std::streamsize>(value.size()));
      if (!out) throw std::runtime_error("cannot write " + temporary.string());
    }
    std::filesystem::rename(temporary, target);  // readers see whole values only
  }

  std::optional<std::string> Get(std::string_view key,
                                 std::chrono::milliseconds timeout) override {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (auto value = TryGet(key)) return value;
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  std::optional<std::string> TryGet(std::string_view key) override {
    std::ifstream in(PathOf(key), std::ios::binary);
    if (!in) return std::nullopt;
    std::ostringstream value;
    value << in.rdbuf();
    return value.str();
  }

 private:
  std::filesystem::path PathOf(std::string_view key) const {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string name;
    for (unsigned char c : key) {
      name += kHex[c >> 4];
      name += kHex[c & 15];
    }
    return directory_ / name;
  }
  std::filesystem::path directory_;
};

// Client options from TORCH_TPU_TEST_MULTIPROCESS_OPTIONS ("name=value;..."; true/false are
// booleans, integers are int64, anything else a string), e.g. "preallocate=false" so that
// processes sharing a GPU do not each claim most of its memory.
std::vector<pjrt::CreateOption> OptionsFromEnvironment() {
  std::vector<pjrt::CreateOption> options;
  const char* text = std::getenv("TORCH_TPU_TEST_MULTIPROCESS_OPTIONS");
  std::stringstream stream(text ? text : "");
  std::string item;
  while (std::getline(stream, item, ';')) {
    size_t equals = item.find('=');
    if (equals == std::string::npos) continue;
    std::string name = item.substr(0, equals), value = item.substr(equals + 1);
    if (value == "true" || value == "false") {
      options.push_back({name, value == "true"});
    } else if (!value.empty() && value.find_first_not_of("-0123456789") == std::string::npos) {
      options.push_back({name, int64_t{std::stoll(value)}});
    } else {
      options.push_back({name, value});
    }
  }
  return options;
}

// One rank's work in its own process: exit status 0 when every collective matched.
int RunRank(const std::string& plugin_path, int rank, int world,
            const std::filesystem::path& store_directory) {
  try {
    // On one machine whose processes share a GPU, NCCL would take them for one rank twice;
    // distinct host ids make it treat them as separate hosts (it then moves data over sockets).
    if (std::getenv("TORCH_TPU_TEST_DISTINCT_NCCL_HOSTS")) {
      setenv("NCCL_HOSTID", ("torch_tpu_rank" + std::to_string(rank)).c_str(), 1);
    }
    auto plugin = pjrt::PjrtPlugin::Load(plugin_path);
    pjrt::MultiProcessOptions multi_process{rank, world,
                                            std::make_shared<DirectoryStore>(store_directory)};
    auto client = pjrt::PjrtClient::Create(plugin, OptionsFromEnvironment(), multi_process);
    if (client->process_count() != world || client->process_index() != rank) {
      std::fprintf(stderr, "rank %d: client spans %d processes, is process %d\n", rank,
                   client->process_count(), client->process_index());
      return 2;
    }
    std::vector<int64_t> devices = collectives::DeviceCollectives::OneDevicePerProcess(*client);
    collectives::DeviceCollectives group(client, devices);
    std::vector<std::string> failures = CheckEveryCollective(group, *client, devices);
    for (const std::string& failure : failures) {
      std::fprintf(stderr, "rank %d: %s\n", rank, failure.c_str());
    }
    std::fprintf(stderr, "rank %d: %zu collectives on %s, %zu failed\n", rank,
                 EveryCollective(world).size(), client->platform_name().c_str(),
                 failures.size());
    return failures.empty() ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "rank %d: %s\n", rank, error.what());
    return 3;
  }
}

TEST(MultiProcessCollectives, TheCpuPluginGivesASingleProcessClient) {
  // What makes torch_tpu stage collectives through the host on the CPU plugin: asked for a client
  // of two processes, it ignores the store and gives a client of one.
  auto plugin = pjrt::PjrtPlugin::Load(TestPluginPath());
  std::filesystem::path directory =
      std::filesystem::temp_directory_path() / ("torch_tpu_kv_cpu" + std::to_string(getpid()));
  std::filesystem::create_directories(directory);
  pjrt::MultiProcessOptions multi_process{1, 2, std::make_shared<DirectoryStore>(directory)};
  auto client = pjrt::PjrtClient::Create(plugin, {{"cpu_device_count", int64_t{1}}}, multi_process);
  EXPECT_EQ(client->process_count(), 1);
  EXPECT_EQ(client->process_index(), 0);
  EXPECT_EQ(client->global_devices().size(), client->addressable_devices().size());
  std::filesystem::remove_all(directory);
}

TEST(MultiProcessCollectives, InvalidNodeIsAClearError) {
  auto plugin = pjrt::PjrtPlugin::Load(TestPluginPath());
  try {
    pjrt::PjrtClient::Create(plugin, {}, pjrt::MultiProcessOptions{2, 2, nullptr});
    FAIL() << "expected PjrtError";
  } catch (const pjrt::PjrtError& error) {
    EXPECT_STREQ(error.what(),
                 "PJRT_Client_Create: node_id 2 of 2 nodes needs 0 <= node_id < num_nodes and a "
                 "key-value store");
  }
}

TEST(MultiProcessCollectives, EveryCollectiveAcrossProcesses) {
  const char* plugin_path = std::getenv("TORCH_TPU_TEST_MULTIPROCESS_PJRT_PLUGIN");
  if (plugin_path == nullptr) {
    GTEST_SKIP() << "needs a plugin with multi-process clients (GPU or TPU): set "
                    "TORCH_TPU_TEST_MULTIPROCESS_PJRT_PLUGIN";
  }
  // Two processes unless TORCH_TPU_TEST_MULTIPROCESS_WORLD says more.
  const char* world_text = std::getenv("TORCH_TPU_TEST_MULTIPROCESS_WORLD");
  const int world = world_text ? std::max(2, std::atoi(world_text)) : 2;
  std::filesystem::path directory =
      std::filesystem::temp_directory_path() / ("torch_tpu_kv" + std::to_string(getpid()));
  std::filesystem::remove_all(directory);
  std::filesystem::create_directories(directory);
  std::vector<pid_t> ranks;
  for (int rank = 0; rank < world; ++rank) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) _exit(RunRank(plugin_path, rank, world, directory));
    ranks.push_back(pid);
  }
  // A rank that hangs must not hang the test: give them a few minutes, then kill.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(3);
  for (int rank = 0; rank < world; ++rank) {
    int status = 0;
    while (waitpid(ranks[rank], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t pid : ranks) kill(pid, SIGKILL);
        waitpid(ranks[rank], &status, 0);
        ADD_FAILURE() << "rank " << rank << " did not finish in time";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << rank << " ended with status " << status << " (its messages are above)";
  }
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace torch_tpu::testing
