// Checks every device collective against values computed on the host, for the replicas this
// process runs. Shared by the in-process test (one process runs every replica: the CPU plugin)
// and the multi-process test (one replica per process: GPU and TPU plugins).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "collectives/device_collectives.h"

namespace torch_tpu::testing {

using collectives::CollectiveKind;
using collectives::CollectiveSpec;
using collectives::ReduceOp;
using stablehlo::ElementType;

// Values are small integers (exact in every element type used), kept as doubles on the host.
using HostValues = std::vector<double>;

inline PJRT_Buffer_Type BufferType(ElementType type) {
  switch (type) {
    case ElementType::kF32: return PJRT_Buffer_Type_F32;
    case ElementType::kBF16: return PJRT_Buffer_Type_BF16;
    case ElementType::kS64: return PJRT_Buffer_Type_S64;
    case ElementType::kPred: return PJRT_Buffer_Type_PRED;
    default: throw std::invalid_argument("collectives test: unsupported element type");
  }
}

inline std::string Encode(ElementType type, const HostValues& values) {
  std::string bytes;
  for (double v : values) {
    if (type == ElementType::kF32) {
      float f = static_cast<float>(v);
      bytes.append(reinterpret_cast<const char*>(&f), sizeof f);
    } else if (type == ElementType::kBF16) {
      float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      uint16_t half = static_cast<uint16_t>(bits >> 16);  // exact for these small integers
      bytes.append(reinterpret_cast<const char*>(&half), sizeof half);
    } else if (type == ElementType::kS64) {
      int64_t i = static_cast<int64_t>(v);
      bytes.append(reinterpret_cast<const char*>(&i), sizeof i);
    } else {
      bytes.push_back(v != 0 ? 1 : 0);
    }
  }
  return bytes;
}

inline HostValues Decode(ElementType type, const std::string& bytes) {
  HostValues values;
  if (type == ElementType::kF32) {
    for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
      float f;
      std::memcpy(&f, bytes.data() + i, 4);
      values.push_back(f);
    }
  } else if (type == ElementType::kBF16) {
    for (size_t i = 0; i + 2 <= bytes.size(); i += 2) {
      uint16_t half;
      std::memcpy(&half, bytes.data() + i, 2);
      uint32_t bits = static_cast<uint32_t>(half) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      values.push_back(f);
    }
  } else if (type == ElementType::kS64) {
    for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
      int64_t v;
      std::memcpy(&v, bytes.data() + i, 8);
      values.push_back(static_cast<double>(v));
    }
  } else {
    for (char c : bytes) values.push_back(c != 0 ? 1 : 0);
  }
  return values;
}

// One case: the spec, each replica's input, and each replica's expected result.
struct CollectiveCase {
  CollectiveSpec spec;
  std::function<HostValues(int64_t replica)> input;
  std::function<HostValues(int64_t replica, const std::vector<HostValues>& inputs)> expected;
};

inline int64_t Elements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

inline HostValues Combine(const std::vector<HostValues>& inputs,
                          const std::function<double(double, double)>& op) {
  HostValues result = inputs[0];
  for (size_t r = 1; r < inputs.size(); ++r) {
    for (size_t i = 0; i < result.size(); ++i) result[i] = op(result[i], inputs[r][i]);
  }
  return result;
}

inline std::vector<CollectiveCase> EveryCollective(int64_t world) {
  std::vector<CollectiveCase> cases;
  auto add = [&](CollectiveKind kind, ElementType type, std::vector<int64_t> dims,
                 std::function<HostValues(int64_t)> input,
                 std::function<HostValues(int64_t, const std::vector<HostValues>&)> expected,
                 ReduceOp op = ReduceOp::kSum, int64_t dimension = 0) {
    CollectiveSpec spec;
    spec.kind = kind;
    spec.element_type = type;
    spec.dims = std::move(dims);
    spec.world_size = world;
    spec.reduce_op = op;
    spec.dimension = dimension;
    cases.push_back({std::move(spec), std::move(input), std::move(expected)});
  };
  auto ramp = [](int64_t n, double scale, double offset) {
    return [=](int64_t r) {
      HostValues v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = offset + scale * r + static_cast<double>(i % 7);
      return v;
    };
  };
  auto reduction = [](std::function<double(double, double)> op) {
    return [op](int64_t, const std::vector<HostValues>& inputs) { return Combine(inputs, op); };
  };
  auto plus = [](double a, double b) { return a + b; };
  add(CollectiveKind::kAllReduce, ElementType::kF32, {2, 3}, ramp(6, 10, 1), reduction(plus));
  add(CollectiveKind::kAllReduce, ElementType::kBF16, {5}, ramp(5, 4, -3), reduction(plus));
  add(CollectiveKind::kAllReduce, ElementType::kS64, {6}, ramp(6, -3, 2),
      reduction([](double a, double b) { return std::max(a, b); }), ReduceOp::kMax);
  add(CollectiveKind::kAllReduce, ElementType::kS64, {6}, ramp(6, 5, -4),
      reduction([](double a, double b) { return std::min(a, b); }), ReduceOp::kMin);
  add(CollectiveKind::kAllReduce, ElementType::kF32, {4}, ramp(4, 1, 1),
      reduction([](double a, double b) { return a * b; }), ReduceOp::kProduct);
  add(CollectiveKind::kAllReduce, ElementType::kS64, {5}, ramp(5, 3, 1),
      reduction([](double a, double b) {
        return static_cast<double>(static_cast<int64_t>(a) ^ static_cast<int64_t>(b));
      }),
      ReduceOp::kBitwiseXor);
  add(CollectiveKind::kAllReduce, ElementType::kF32, {3}, ramp(3, 2, 1),
      [world](int64_t, const std::vector<HostValues>& inputs) {
        HostValues sum = Combine(inputs, [](double a, double b) { return a + b; });
        for (double& v : sum) v /= static_cast<double>(world);
        return sum;
      },
      ReduceOp::kAverage);
  // Booleans: sum is "any".
  add(CollectiveKind::kAllReduce, ElementType::kPred, {3},
      [](int64_t r) { return HostValues{0, r == 0 ? 1.0 : 0.0, 1}; },
      reduction([](double a, double b) { return (a != 0 || b != 0) ? 1.0 : 0.0; }));
  // All-gather along dimension 1 of [2, 3]: [2, 3 * world], replica-major within each row.
  add(CollectiveKind::kAllGather, ElementType::kF32, {2, 3}, ramp(6, 100, 0),
      [world](int64_t, const std::vector<HostValues>& inputs) {
        HostValues out;
        for (int64_t row = 0; row < 2; ++row) {
          for (int64_t r = 0; r < world; ++r) {
            for (int64_t c = 0; c < 3; ++c) out.push_back(inputs[r][row * 3 + c]);
          }
        }
        return out;
      },
      ReduceOp::kSum, 1);
  // Reduce-scatter along dimension 0 of [2 * world, 2]: replica r keeps rows 2r, 2r + 1.
  add(CollectiveKind::kReduceScatter, ElementType::kS64, {2 * world, 2}, ramp(4 * world, 10, 0),
      [](int64_t replica, const std::vector<HostValues>& inputs) {
        HostValues sum = Combine(inputs, [](double a, double b) { return a + b; });
        return HostValues(sum.begin() + replica * 4, sum.begin() + replica * 4 + 4);
      });
  // All-to-all along dimension 0 of [3 * world]: replica j gets block j of every replica.
  add(CollectiveKind::kAllToAll, ElementType::kBF16, {3 * world}, ramp(3 * world, 8, 0),
      [world](int64_t replica, const std::vector<HostValues>& inputs) {
        HostValues out;
        for (int64_t r = 0; r < world; ++r) {
          auto block = inputs[r].begin() + replica * 3;
          out.insert(out.end(), block, block + 3);
        }
        return out;
      });
  // Broadcast from the last replica.
  CollectiveSpec broadcast;
  broadcast.kind = CollectiveKind::kBroadcast;
  broadcast.element_type = ElementType::kF32;
  broadcast.dims = {4};
  broadcast.world_size = world;
  broadcast.root = world - 1;
  cases.push_back({broadcast, ramp(4, 50, -7),
                   [world](int64_t, const std::vector<HostValues>& inputs) {
                     return inputs[world - 1];
                   }});
  // Broadcast from replica 0 of negative bf16 values (bit patterns travel exactly).
  broadcast.element_type = ElementType::kBF16;
  broadcast.root = 0;
  cases.push_back({broadcast, ramp(4, 3, -9),
                   [](int64_t, const std::vector<HostValues>& inputs) { return inputs[0]; }});
  add(CollectiveKind::kAllReduce, ElementType::kS64, {4}, ramp(4, 6, 1),
      reduction([](double a, double b) {
        return static_cast<double>(static_cast<int64_t>(a) | static_cast<int64_t>(b));
      }),
      ReduceOp::kBitwiseOr);
  // A ring: replica r sends to r + 1.
  CollectiveSpec ring;
  ring.kind = CollectiveKind::kPermute;
  ring.element_type = ElementType::kS64;
  ring.dims = {3};
  ring.world_size = world;
  for (int64_t r = 0; r < world; ++r) ring.pairs.push_back({r, (r + 1) % world});
  cases.push_back({ring, ramp(3, 20, 1),
                   [world](int64_t replica, const std::vector<HostValues>& inputs) {
                     return inputs[(replica + world - 1) % world];
                   }});
  return cases;
}

// Runs every case on `collectives` (whose local replicas this process feeds) and returns one
// message per mismatch or error; empty when all hold.
inline std::vector<std::string> CheckEveryCollective(collectives::DeviceCollectives& group,
                                                     const pjrt::PjrtClient& client,
                                                     const std::vector<int64_t>& replica_devices) {
  std::vector<std::string> failures;
  int64_t world = group.world_size();
  for (const CollectiveCase& test : EveryCollective(world)) {
    std::string name = collectives::Describe(test.spec);
    try {
      std::vector<HostValues> inputs;
      for (int64_t r = 0; r < world; ++r) inputs.push_back(test.input(r));
      std::vector<pjrt::PjrtBuffer> operands;
      std::vector<PJRT_Buffer*> handles;
      std::vector<std::string> bytes;
      for (int64_t replica : group.local_replicas()) {
        bytes.push_back(Encode(test.spec.element_type, inputs[replica]));
        const pjrt::PjrtDevice* device = nullptr;
        for (const auto& d : client.addressable_devices()) {
          if (d.id == replica_devices[replica]) device = &d;
        }
        operands.push_back(client
                               .BufferFromHost(bytes.back().data(), bytes.back().size(),
                                               BufferType(test.spec.element_type),
                                               test.spec.dims, *device)
                               .buffer);
        handles.push_back(operands.back().get());
      }
      std::vector<pjrt::ExecutionResult> results = group.Run(test.spec, handles);
      for (size_t i = 0; i < results.size(); ++i) {
        int64_t replica = group.local_replicas()[i];
        results[i].done.Await();
        const pjrt::PjrtBuffer& out = results[i].outputs.at(0);
        std::string raw(out.host_size_bytes(), '\0');
        out.ToHost(raw.data(), raw.size()).Await();
        HostValues got = Decode(test.spec.element_type, raw);
        HostValues want = test.expected(replica, inputs);
        if (got != want) {
          std::string text = name + ", replica " + std::to_string(replica) + ": got";
          for (double v : got) text += " " + std::to_string(v);
          text += "; want";
          for (double v : want) text += " " + std::to_string(v);
          failures.push_back(text);
        }
      }
    } catch (const std::exception& error) {
      failures.push_back(name + ": " + error.what());
    }
  }
  return failures;
}

}  // namespace torch_tpu::testing
