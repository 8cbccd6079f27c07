// Cross-replica collective programs on the real XLA CPU plugin, every replica in this process
// (the CPU plugin runs collectives between its own devices; it has no multi-process clients).
#include "collectives/device_collectives.h"
#include "collectives_test_support.h"
#include "pjrt/error.h"
#include "pjrt_test_support.h"

namespace torch_tpu::testing {
namespace {

std::shared_ptr<pjrt::PjrtClient> ClientWithDevices(int64_t count) {
  auto plugin = pjrt::PjrtPlugin::Load(TestPluginPath());
  return pjrt::PjrtClient::Create(plugin, {{"cpu_device_count", count}});
}

void ExpectEveryCollective(int64_t world, std::vector<int64_t> replica_devices) {
  auto client = ClientWithDevices(world);
  collectives::DeviceCollectives group(client, replica_devices);
  ASSERT_EQ(group.local_replicas().size(), static_cast<size_t>(world));
  std::vector<std::string> failures = CheckEveryCollective(group, *client, replica_devices);
  for (const std::string& failure : failures) ADD_FAILURE() << failure;
  EXPECT_EQ(group.programs_compiled(), EveryCollective(world).size());
}

TEST(DeviceCollectives, EveryCollectiveOverTwoReplicas) { ExpectEveryCollective(2, {0, 1}); }

TEST(DeviceCollectives, ReplicasFollowTheDeviceAssignment) {
  // Replica 0 on device 2, replica 2 on device 0: results follow replicas, not device order.
  ExpectEveryCollective(3, {2, 1, 0});
}

TEST(DeviceCollectives, ProgramsAreReusedPerSpec) {
  auto client = ClientWithDevices(2);
  collectives::DeviceCollectives group(client, {0, 1});
  EXPECT_TRUE(CheckEveryCollective(group, *client, {0, 1}).empty());
  EXPECT_TRUE(CheckEveryCollective(group, *client, {0, 1}).empty());
  EXPECT_EQ(group.programs_compiled(), EveryCollective(2).size());
}

TEST(DeviceCollectives, SpecsACollectiveCannotTakeAreClearErrors) {
  collectives::CollectiveSpec spec;
  spec.kind = collectives::CollectiveKind::kAllReduce;
  spec.element_type = stablehlo::ElementType::kS64;
  spec.dims = {4};
  spec.world_size = 2;
  spec.reduce_op = collectives::ReduceOp::kAverage;
  try {
    collectives::CollectiveModuleText(spec);
    FAIL() << "expected invalid_argument";
  } catch (const std::invalid_argument& error) {
    EXPECT_STREQ(error.what(),
                 "all_reduce(average) i64[4] over 2 replicas: an average needs floating-point "
                 "or complex elements");
  }
  spec.kind = collectives::CollectiveKind::kReduceScatter;
  spec.reduce_op = collectives::ReduceOp::kSum;
  spec.dims = {3};
  try {
    collectives::CollectiveModuleText(spec);
    FAIL() << "expected invalid_argument";
  } catch (const std::invalid_argument& error) {
    EXPECT_STREQ(error.what(),
                 "reduce_scatter(sum) i64[3] over 2 replicas: stablehlo.reduce_scatter: "
                 "dimension 0 of tensor<3xi64> does not divide into 2 blocks");
  }
}

TEST(DeviceCollectives, UnknownOrRepeatedDevicesAreRejected) {
  auto client = ClientWithDevices(2);
  try {
    collectives::DeviceCollectives group(client, {0, 0});
    FAIL() << "expected PjrtError";
  } catch (const pjrt::PjrtError& error) {
    EXPECT_STREQ(error.what(),
                 "device collectives: replica 1's device 0 is used twice (the cpu client has 2 "
                 "devices)");
  }
  EXPECT_THROW(collectives::DeviceCollectives(client, {0, 7}), pjrt::PjrtError);
}

TEST(DeviceCollectives, OneDevicePerProcessOfASingleProcessClient) {
  auto client = ClientWithDevices(3);
  EXPECT_EQ(client->process_count(), 1);
  EXPECT_EQ(client->process_index(), 0);
  EXPECT_EQ(collectives::DeviceCollectives::OneDevicePerProcess(*client),
            std::vector<int64_t>{0});
}

}  // namespace
}  // namespace torch_tpu::testing
