// The PJRT layer against the real XLA CPU plugin: loading, transfers, compile, execute, errors.
#include <atomic>
#include <thread>

#include "pjrt/error.h"
#include "pjrt_test_support.h"

namespace torch_tpu::testing {
namespace {

using pjrt::PjrtError;

constexpr char kAddModule[] = R"(
module @add attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>) {
    %0 = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%0) : (tensor<4xf32>) -> ()
  }
}
)";

std::shared_ptr<pjrt::PjrtLoadedExecutable> CompileAdd() {
  return SharedClient()->Compile(kAddModule, pjrt::SingleDeviceCompileOptions());
}

TEST(PjrtPlugin, LoadsTheCpuPluginWithMatchingMajorVersion) {
  auto plugin = pjrt::PjrtPlugin::Load(TestPluginPath());
  EXPECT_EQ(plugin->api_major_version(), PJRT_API_MAJOR);
  EXPECT_EQ(pjrt::PjrtPlugin::Load(TestPluginPath()), plugin) << "plugins are loaded once";
  EXPECT_TRUE(plugin->Attributes().count("xla_version"));
}

TEST(PjrtPlugin, MissingFileIsAClearError) {
  try {
    pjrt::PjrtPlugin::Load("/nonexistent/xla_plugin.so");
    FAIL() << "expected PjrtError";
  } catch (const PjrtError& error) {
    EXPECT_EQ(error.code(), PJRT_Error_Code_NOT_FOUND);
    EXPECT_NE(std::string(error.what()).find("/nonexistent/xla_plugin.so"), std::string::npos);
  }
}

TEST(PjrtPlugin, LibraryWithoutGetPjrtApiIsRejected) {
  // Any shared library that is not a plugin works; libm is on every Linux machine.
  const char* libm = "/lib/x86_64-linux-gnu/libm.so.6";
  try {
    pjrt::PjrtPlugin::Load(libm);
    FAIL() << "expected PjrtError";
  } catch (const PjrtError& error) {
    EXPECT_NE(std::string(error.what()).find("GetPjrtApi"), std::string::npos) << error.what();
  }
}

TEST(PjrtClient, DescribesPlatformAndDevices) {
  auto client = SharedClient();
  EXPECT_EQ(client->platform_name(), "cpu");
  ASSERT_EQ(client->addressable_devices().size(), 1u);
  EXPECT_EQ(client->device(0).kind, "cpu");
  EXPECT_THROW(client->device(1), PjrtError);
}

TEST(PjrtClient, DeviceCountComesFromCreateOptions) {
  auto plugin = pjrt::PjrtPlugin::Load(TestPluginPath());
  auto client = pjrt::PjrtClient::Create(plugin, {{"cpu_device_count", int64_t{3}}});
  EXPECT_EQ(client->addressable_devices().size(), 3u);
}

TEST(PjrtBuffer, RoundTripsThroughTheDevice) {
  std::vector<int32_t> values = {1, -2, 3, -4, 5, -6};
  auto buffer = ToDevice(values, PJRT_Buffer_Type_S32, {2, 3});
  EXPECT_EQ(buffer.element_type(), PJRT_Buffer_Type_S32);
  EXPECT_EQ(buffer.dimensions(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(buffer.host_size_bytes(), values.size() * sizeof(int32_t));
  EXPECT_EQ(ToHost<int32_t>(buffer), values);
}

TEST(PjrtBuffer, AsyncHostTransferKeepsDataUntilReleased) {
  auto client = SharedClient();
  std::vector<double> values(1 << 16);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i) * 0.5;
  int64_t dims[] = {static_cast<int64_t>(values.size())};
  auto transfer = client->BufferFromHost(values.data(), values.size() * sizeof(double),
                                         PJRT_Buffer_Type_F64, dims, client->device(0),
                                         /*wait_for_host_copy=*/false);
  transfer.host_buffer_released.Await();
  EXPECT_EQ(ToHost<double>(transfer.buffer), values);
}

TEST(PjrtBuffer, WrongHostSizeIsRejectedBothWays) {
  auto client = SharedClient();
  std::vector<float> values(5);
  int64_t dims[] = {2, 3};
  EXPECT_THROW(client->BufferFromHost(values.data(), values.size() * sizeof(float),
                                      PJRT_Buffer_Type_F32, dims, client->device(0)),
               PjrtError);
  auto buffer = ToDevice(std::vector<float>(6, 1.0f), PJRT_Buffer_Type_F32, {2, 3});
  try {
    buffer.ToHost(values.data(), values.size() * sizeof(float));
    FAIL() << "expected PjrtError";
  } catch (const PjrtError& error) {
    EXPECT_NE(std::string(error.what()).find("24 bytes"), std::string::npos) << error.what();
  }
}

TEST(PjrtExecutable, CompilesAndRunsStableHloText) {
  auto executable = CompileAdd();
  EXPECT_EQ(executable->num_outputs(), 1u);
  auto a = ToDevice(std::vector<float>{1, 2, 3, 4}, PJRT_Buffer_Type_F32, {4});
  auto b = ToDevice(std::vector<float>{10, 20, 30, 40}, PJRT_Buffer_Type_F32, {4});
  const pjrt::PjrtBuffer* arguments[] = {&a, &b};
  auto result = executable->Execute(std::span<const pjrt::PjrtBuffer* const>(arguments));
  result.done.Await();
  ASSERT_EQ(result.outputs.size(), 1u);
  EXPECT_EQ(ToHost<float>(result.outputs[0]), (std::vector<float>{11, 22, 33, 44}));
}

TEST(PjrtExecutable, OutputsFeedFurtherExecutionsBeforeTheyAreReady) {
  auto executable = CompileAdd();
  auto one = ToDevice(std::vector<float>{1, 1, 1, 1}, PJRT_Buffer_Type_F32, {4});
  pjrt::PjrtBuffer accumulator = ToDevice(std::vector<float>{0, 0, 0, 0}, PJRT_Buffer_Type_F32, {4});
  for (int i = 0; i < 100; ++i) {
    const pjrt::PjrtBuffer* arguments[] = {&accumulator, &one};
    accumulator =
        std::move(executable->Execute(std::span<const pjrt::PjrtBuffer* const>(arguments))
                      .outputs[0]);
  }
  EXPECT_EQ(ToHost<float>(accumulator), (std::vector<float>{100, 100, 100, 100}));
}

TEST(PjrtExecutable, RejectedProgramCarriesTheCompilerMessage) {
  const char* bad = R"(
module @bad {
  func.func public @main(%a: tensor<4xf32>) -> (tensor<4xf32>) {
    %0 = "stablehlo.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<5xf32>
    "func.return"(%0) : (tensor<5xf32>) -> ()
  }
}
)";
  try {
    SharedClient()->Compile(bad, pjrt::SingleDeviceCompileOptions());
    FAIL() << "expected PjrtError";
  } catch (const PjrtError& error) {
    EXPECT_NE(std::string(error.what()).find("compiling StableHLO"), std::string::npos);
    EXPECT_GT(std::string(error.what()).size(), std::string("compiling StableHLO: ").size() + 10);
  }
  EXPECT_THROW(SharedClient()->Compile("this is not MLIR", pjrt::SingleDeviceCompileOptions()),
               PjrtError);
}

TEST(PjrtExecutable, WrongArgumentsAreAnErrorNotACrash) {
  auto executable = CompileAdd();
  auto a = ToDevice(std::vector<float>{1, 2, 3, 4}, PJRT_Buffer_Type_F32, {4});
  auto short_buffer = ToDevice(std::vector<float>{1, 2, 3}, PJRT_Buffer_Type_F32, {3});
  const pjrt::PjrtBuffer* one_argument[] = {&a};
  EXPECT_THROW(executable->Execute(std::span<const pjrt::PjrtBuffer* const>(one_argument)),
               PjrtError);
  const pjrt::PjrtBuffer* wrong_shape[] = {&a, &short_buffer};
  EXPECT_THROW(
      {
        auto result = executable->Execute(std::span<const pjrt::PjrtBuffer* const>(wrong_shape));
        result.done.Await();
      },
      PjrtError);
}

TEST(PjrtExecutable, SerializeDeserializeRoundTrip) {
  auto executable = CompileAdd();
  std::string bytes = executable->Serialize();
  ASSERT_FALSE(bytes.empty());
  auto restored = SharedClient()->DeserializeAndLoad(bytes);
  auto a = ToDevice(std::vector<float>{1, 2, 3, 4}, PJRT_Buffer_Type_F32, {4});
  const pjrt::PjrtBuffer* arguments[] = {&a, &a};
  auto result = restored->Execute(std::span<const pjrt::PjrtBuffer* const>(arguments));
  EXPECT_EQ(ToHost<float>(result.outputs[0]), (std::vector<float>{2, 4, 6, 8}));
  EXPECT_THROW(SharedClient()->DeserializeAndLoad("garbage bytes"), PjrtError);
}

TEST(PjrtExecutable, ManyHostThreadsDispatchAtOnce) {
  auto executable = CompileAdd();
  std::atomic<int> correct{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        float v = static_cast<float>(t * 100 + i);
        auto a = ToDevice(std::vector<float>{v, v, v, v}, PJRT_Buffer_Type_F32, {4});
        const pjrt::PjrtBuffer* arguments[] = {&a, &a};
        auto result = executable->Execute(std::span<const pjrt::PjrtBuffer* const>(arguments));
        if (ToHost<float>(result.outputs[0]) == std::vector<float>(4, 2 * v)) ++correct;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(correct.load(), 8 * 25);
}

TEST(PjrtEvent, OnReadyRunsTheCallback) {
  auto executable = CompileAdd();
  auto a = ToDevice(std::vector<float>{1, 2, 3, 4}, PJRT_Buffer_Type_F32, {4});
  const pjrt::PjrtBuffer* arguments[] = {&a, &a};
  auto result = executable->Execute(std::span<const pjrt::PjrtBuffer* const>(arguments));
  std::atomic<bool> called{false};
  std::string error = "not called";
  result.done.OnReady([&](const std::string& message) {
    error = message;
    called = true;
  });
  result.done.Await();
  for (int i = 0; i < 1000 && !called; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(called.load());
  EXPECT_EQ(error, "");
  EXPECT_TRUE(result.done.IsReady());
}

}  // namespace
}  // namespace torch_tpu::testing
