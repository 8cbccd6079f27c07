// StableHLO programs built with the builder, compiled and run on the real XLA CPU plugin, checked
// against values computed on the host here.
#include <cmath>
#include <numeric>

#include "pjrt/error.h"
#include "pjrt_test_support.h"
#include "stablehlo/loops.h"
#include "stablehlo/module.h"

namespace torch_tpu::testing {
namespace {

using stablehlo::ElementType;
using stablehlo::FunctionBuilder;
using stablehlo::Module;
using stablehlo::TensorType;
using stablehlo::Value;

std::vector<float> CompileAndRun(Module& module, const std::vector<const pjrt::PjrtBuffer*>& arguments) {
  auto executable = SharedClient()->Compile(module.ToText(), pjrt::SingleDeviceCompileOptions());
  auto result = executable->Execute(std::span<const pjrt::PjrtBuffer* const>(arguments));
  return ToHost<float>(result.outputs.at(0));
}

std::vector<float> Iota(size_t count, float start, float step) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = start + step * static_cast<float>(i);
  return values;
}

TEST(BuilderPrograms, ElementwiseChain) {
  Module module("chain");
  FunctionBuilder& f = module.main();
  Value x = f.Argument(TensorType{ElementType::kF32, {2, 3}});
  Value y = f.Argument(TensorType{ElementType::kF32, {2, 3}});
  // tanh(x * y + 1) - exp(-|x|) / 2
  Value product = f.Add(f.Multiply(x, y), f.Constant(ElementType::kF32, 1.0, {2, 3}));
  Value decay = f.Divide(f.Exp(f.Negate(f.Abs(x))), f.Constant(ElementType::kF32, 2.0, {2, 3}));
  f.Return({f.Subtract(f.Tanh(product), decay)});

  std::vector<float> xs = Iota(6, -1.5f, 0.5f), ys = Iota(6, 2.0f, -0.75f);
  auto a = ToDevice(xs, PJRT_Buffer_Type_F32, {2, 3});
  auto b = ToDevice(ys, PJRT_Buffer_Type_F32, {2, 3});
  std::vector<float> got = CompileAndRun(module, {&a, &b});
  for (size_t i = 0; i < xs.size(); ++i) {
    const float expected = std::tanh(xs[i] * ys[i] + 1.0f) - std::exp(-std::fabs(xs[i])) / 2.0f;
    EXPECT_NEAR(got[i], expected, 1e-5f) << "element " << i;
  }
}

TEST(BuilderPrograms, BroadcastInDim) {
  Module module("broadcast");
  FunctionBuilder& f = module.main();
  Value row = f.Argument(TensorType{ElementType::kF32, {3}});
  Value column = f.Argument(TensorType{ElementType::kF32, {2, 1}});
  Value rows = f.BroadcastInDim(row, {2, 3}, {1});
  Value columns = f.BroadcastInDim(f.Reshape(column, {2}), {2, 3}, {0});
  f.Return({f.Add(rows, columns)});

  std::vector<float> r = {1, 2, 3}, c = {10, 20};
  auto a = ToDevice(r, PJRT_Buffer_Type_F32, {3});
  auto b = ToDevice(c, PJRT_Buffer_Type_F32, {2, 1});
  std::vector<float> got = CompileAndRun(module, {&a, &b});
  std::vector<float> expected;
  for (float ci : c) {
    for (float ri : r) expected.push_back(ci + ri);
  }
  EXPECT_EQ(got, expected);
}

TEST(BuilderPrograms, BatchedDotGeneral) {
  constexpr int64_t kBatch = 2, kM = 3, kK = 4, kN = 2;
  Module module("dot");
  FunctionBuilder& f = module.main();
  Value lhs = f.Argument(TensorType{ElementType::kF32, {kBatch, kM, kK}});
  Value rhs = f.Argument(TensorType{ElementType::kF32, {kBatch, kK, kN}});
  FunctionBuilder::DotDimensions dimensions{{0}, {0}, {2}, {1}};
  Value product = f.DotGeneral(lhs, rhs, dimensions, std::nullopt,
                               FunctionBuilder::Precision::kHighest);
  ASSERT_EQ(product.dims(), (std::vector<int64_t>{kBatch, kM, kN}));
  f.Return({product});

  std::vector<float> a = Iota(kBatch * kM * kK, -2.0f, 0.25f);
  std::vector<float> b = Iota(kBatch * kK * kN, 1.0f, -0.125f);
  auto lhs_buffer = ToDevice(a, PJRT_Buffer_Type_F32, {kBatch, kM, kK});
  auto rhs_buffer = ToDevice(b, PJRT_Buffer_Type_F32, {kBatch, kK, kN});
  std::vector<float> got = CompileAndRun(module, {&lhs_buffer, &rhs_buffer});
  for (int64_t batch = 0; batch < kBatch; ++batch) {
    for (int64_t i = 0; i < kM; ++i) {
      for (int64_t j = 0; j < kN; ++j) {
        float expected = 0;
        for (int64_t k = 0; k < kK; ++k) {
          expected += a[(batch * kM + i) * kK + k] * b[(batch * kK + k) * kN + j];
        }
        EXPECT_NEAR(got[(batch * kM + i) * kN + j], expected, 1e-4f);
      }
    }
  }
}

TEST(BuilderPrograms, ReduceSumAndMax) {
  Module module("reduce");
  FunctionBuilder& f = module.main();
  Value x = f.Argument(TensorType{ElementType::kF32, {3, 4}});
  Value sums = f.Reduce({x}, {f.Constant(ElementType::kF32, 0.0)}, {1},
                        [](FunctionBuilder& body, std::span<const Value> args) {
                          return std::vector<Value>{body.Add(args[0], args[1])};
                        })[0];
  Value maxima = f.Reduce({x}, {f.Constant(ElementType::kF32, -INFINITY)}, {0},
                          [](FunctionBuilder& body, std::span<const Value> args) {
                            return std::vector<Value>{body.Maximum(args[0], args[1])};
                          })[0];
  f.Return({f.Concatenate({sums, maxima}, 0)});

  std::vector<float> values = {3, -1, 4, 1, -5, 9, 2, -6, 5, 3, -5, 8};
  auto input = ToDevice(values, PJRT_Buffer_Type_F32, {3, 4});
  std::vector<float> got = CompileAndRun(module, {&input});
  std::vector<float> expected;
  for (int row = 0; row < 3; ++row) {
    expected.push_back(std::accumulate(values.begin() + row * 4, values.begin() + row * 4 + 4, 0.f));
  }
  for (int column = 0; column < 4; ++column) {
    expected.push_back(std::max({values[column], values[4 + column], values[8 + column]}));
  }
  EXPECT_EQ(got, expected);
}

// A counted loop whose body reads its trip index and updates one row per trip with a dynamic
// slice: x[i, :] += i * x[i - 1, :] for i = 1..3, run in order (each row sees the updated one).
TEST(BuilderPrograms, ForLoopUpdatesRowsInOrder) {
  Module module("loop");
  FunctionBuilder& f = module.main();
  Value x = f.Argument(TensorType{ElementType::kF32, {4, 2}});
  std::vector<Value> result = ForLoop(
      f, 1, 4, {x}, [](FunctionBuilder& b, Value i, std::span<const Value> carried) {
        Value zero = b.ConstantInt(ElementType::kS32, 0);
        Value previous = b.Subtract(i, b.ConstantInt(ElementType::kS32, 1));
        Value above = b.DynamicSlice(carried[0], {previous, zero}, {1, 2});
        Value row = b.DynamicSlice(carried[0], {i, zero}, {1, 2});
        Value scale = b.BroadcastInDim(b.Convert(i, ElementType::kF32), {1, 2}, {});
        Value updated = b.Add(row, b.Multiply(scale, above));
        return std::vector<Value>{b.DynamicUpdateSlice(carried[0], updated, {i, zero})};
      });
  f.Return(result);

  std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8};
  auto input = ToDevice(values, PJRT_Buffer_Type_F32, {4, 2});
  std::vector<float> got = CompileAndRun(module, {&input});
  std::vector<float> expected = values;
  for (int i = 1; i < 4; ++i) {
    for (int j = 0; j < 2; ++j) expected[i * 2 + j] += static_cast<float>(i) * expected[(i - 1) * 2 + j];
  }
  EXPECT_EQ(got, expected);
}

TEST(BuilderPrograms, SerializedBuilderProgramStillComputes) {
  Module module("roundtrip");
  FunctionBuilder& f = module.main();
  Value x = f.Argument(TensorType{ElementType::kF32, {4}});
  f.Return({f.Multiply(x, x)});
  auto executable = SharedClient()->Compile(module.ToText(), pjrt::SingleDeviceCompileOptions());
  auto restored = SharedClient()->DeserializeAndLoad(executable->Serialize());
  auto input = ToDevice(std::vector<float>{1, -2, 3, -4}, PJRT_Buffer_Type_F32, {4});
  const pjrt::PjrtBuffer* arguments[] = {&input};
  auto result = restored->Execute(std::span<const pjrt::PjrtBuffer* const>(arguments));
  EXPECT_EQ(ToHost<float>(result.outputs[0]), (std::vector<float>{1, 4, 9, 16}));
}

}  // namespace
}  // namespace torch_tpu::testing
