// Deviceless compilation (pjrt/topology.h) against the real plugins: libtpu compiles for a named
// TPU topology on this host, which has no TPU; the CPU plugin has no topologies to describe.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "pjrt/error.h"
#include "pjrt/executable.h"
#include "pjrt/plugin.h"
#include "pjrt/topology.h"
#include "pjrt_test_support.h"

namespace torch_tpu {
namespace {

constexpr const char* kAddModule = R"(module @add {
  func.func public @main(%arg0: tensor<256xf32>) -> tensor<256xf32> {
    %0 = stablehlo.add %arg0, %arg0 : tensor<256xf32>
    return %0 : tensor<256xf32>
  }
})";

std::shared_ptr<pjrt::PjrtPlugin> LibtpuOrSkip() {
  const char* path = std::getenv("TORCH_TPU_TEST_LIBTPU");
  if (path == nullptr || *path == '\0') return nullptr;
  // Without a TPU, libtpu would spend minutes asking the GCE metadata server about one, and its
  // host-wide lock would keep a second process (another test binary, pytest) from loading it.
  ::setenv("TPU_SKIP_MDS_QUERY", "1", 0);
  ::setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1", 0);
  ::setenv("TPU_WORKER_HOSTNAMES", "localhost", 0);
  return pjrt::PjrtPlugin::Load(path);
}

#define SKIP_WITHOUT_LIBTPU(plugin)                             \
  if (!(plugin))                                                \
  GTEST_SKIP() << "libtpu not installed in the build's Python " \
                  "(pip install libtpu; x86-64 Linux only)"

TEST(PjrtTopologyTest, LibtpuCompilesForNamedTopologiesWithoutDevices) {
  auto plugin = LibtpuOrSkip();
  SKIP_WITHOUT_LIBTPU(plugin);
  for (const char* name : {"v5e:2x2", "v6e:1x1"}) {
    auto topology = pjrt::PjrtTopology::Create(plugin, name);
    EXPECT_EQ(topology->platform_name(), "tpu");
    EXPECT_FALSE(topology->device_kinds().empty());
    auto executable = topology->Compile(kAddModule, pjrt::SingleDeviceCompileOptions());
    EXPECT_EQ(executable->num_outputs(), 1u);
    EXPECT_GT(executable->Serialize().size(), 0u);
    const pjrt::CompiledMemoryStats memory = executable->MemoryStats();
    EXPECT_GE(memory.arguments, 256 * 4) << name;
    EXPECT_GE(memory.outputs, 256 * 4) << name;
    bool has_flops = false;
    for (const auto& [key, value] : executable->CostAnalysis()) has_flops |= key == "flops";
    EXPECT_TRUE(has_flops) << name;
  }
  EXPECT_EQ(pjrt::PjrtTopology::Create(plugin, "v5e:2x2")->device_kinds().size(), 4u);
}

TEST(PjrtTopologyTest, UnknownTopologyAndRejectedProgramCarryThePluginsMessage) {
  auto plugin = LibtpuOrSkip();
  SKIP_WITHOUT_LIBTPU(plugin);
  try {
    pjrt::PjrtTopology::Create(plugin, "v5litepod-4");
    FAIL() << "libtpu accepted a TPU type name as a topology name";
  } catch (const pjrt::PjrtError& error) {
    EXPECT_NE(std::string(error.what()).find("v5litepod-4"), std::string::npos) << error.what();
  }
  auto topology = pjrt::PjrtTopology::Create(plugin, "v5e:1x1");
  EXPECT_THROW(topology->Compile("module { not stablehlo", pjrt::SingleDeviceCompileOptions()),
               pjrt::PjrtError);
}

TEST(PjrtTopologyTest, CpuPluginHasNoTopologies) {
  auto plugin = pjrt::PjrtPlugin::Load(testing::TestPluginPath());
  EXPECT_THROW(pjrt::PjrtTopology::Create(plugin, "v5e:1x1"), pjrt::PjrtError);
}

}  // namespace
}  // namespace torch_tpu
