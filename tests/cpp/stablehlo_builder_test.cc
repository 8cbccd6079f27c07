// Text-level tests of the StableHLO builder: inferred types, emitted syntax, validation errors and
// hashing. Nothing is compiled or executed here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "stablehlo/builder.h"
#include "stablehlo/element_type.h"
#include "stablehlo/loops.h"
#include "stablehlo/module.h"
#include "stablehlo/tensor_type.h"
#include "stablehlo_test_support.h"

namespace torch_tpu::stablehlo {
namespace {

using Dir = FunctionBuilder::ComparisonDirection;

TensorType F32(std::vector<int64_t> dims) { return {ElementType::kF32, std::move(dims)}; }
TensorType S32(std::vector<int64_t> dims) { return {ElementType::kS32, std::move(dims)}; }
TensorType S64(std::vector<int64_t> dims) { return {ElementType::kS64, std::move(dims)}; }

// Sums two scalars; the usual reduction body.
std::vector<Value> AddBody(FunctionBuilder& b, std::span<const Value> args) {
  return {b.Add(args[0], args[1])};
}

// gmock is not required by the build, so substring checks get a small assertion of their own.
::testing::AssertionResult Contains(const std::string& haystack, const std::string& needle) {
  if (haystack.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << needle << "\" not found in:\n" << haystack;
}


// Returns the text of the module's single line containing `needle`.
std::string LineWith(const std::string& text, const std::string& needle) {
  size_t pos = text.find(needle);
  if (pos == std::string::npos) return "<not found: " + needle + ">";
  size_t begin = text.rfind('\n', pos);
  begin = begin == std::string::npos ? 0 : begin + 1;
  size_t end = text.find('\n', pos);
  std::string line = text.substr(begin, end - begin);
  return line.substr(line.find_first_not_of(' '));
}

// ---- Element and tensor types ------------------------------------------------------------------

TEST(ElementTypeTest, NamesAndWidths) {
  EXPECT_EQ(MlirName(ElementType::kPred), "i1");
  EXPECT_EQ(MlirName(ElementType::kS8), "i8");
  EXPECT_EQ(MlirName(ElementType::kS64), "i64");
  EXPECT_EQ(MlirName(ElementType::kU8), "ui8");
  EXPECT_EQ(MlirName(ElementType::kU64), "ui64");
  EXPECT_EQ(MlirName(ElementType::kBF16), "bf16");
  EXPECT_EQ(MlirName(ElementType::kF16), "f16");
  EXPECT_EQ(MlirName(ElementType::kF64), "f64");
  EXPECT_EQ(ByteWidth(ElementType::kPred), 1);
  EXPECT_EQ(ByteWidth(ElementType::kBF16), 2);
  EXPECT_EQ(ByteWidth(ElementType::kU32), 4);
  EXPECT_EQ(ByteWidth(ElementType::kF64), 8);
  EXPECT_TRUE(IsFloat(ElementType::kBF16));
  EXPECT_FALSE(IsFloat(ElementType::kS32));
  EXPECT_TRUE(IsSignedInteger(ElementType::kS16));
  EXPECT_FALSE(IsSignedInteger(ElementType::kU16));
  EXPECT_TRUE(IsUnsignedInteger(ElementType::kU16));
  EXPECT_TRUE(IsInteger(ElementType::kU8));
  EXPECT_FALSE(IsInteger(ElementType::kPred));
  EXPECT_FALSE(IsInteger(ElementType::kF32));
}

TEST(TensorTypeTest, ToStringAndElements) {
  EXPECT_EQ(F32({2, 3}).ToString(), "tensor<2x3xf32>");
  EXPECT_EQ(TensorType({ElementType::kPred, {}}).ToString(), "tensor<i1>");
  EXPECT_EQ(TensorType({ElementType::kU8, {0, 4}}).ToString(), "tensor<0x4xui8>");
  EXPECT_EQ(F32({2, 3, 4}).NumElements(), 24);
  EXPECT_EQ(F32({}).NumElements(), 1);
  EXPECT_EQ(F32({5, 0}).NumElements(), 0);
  EXPECT_EQ(F32({2, 3}).rank(), 2);
  EXPECT_EQ(F32({2, 3}), F32({2, 3}));
  EXPECT_NE(F32({2, 3}), F32({3, 2}));
  EXPECT_NE(F32({2, 3}), S32({2, 3}));
}

// ---- Module text -------------------------------------------------------------------------------

TEST(ModuleTest, AddModuleText) {
  Module m("my_module");
  FunctionBuilder& f = m.main();
  Value a = f.Argument(F32({2, 3}));
  Value b = f.Argument(F32({2, 3}));
  Value sum = f.Add(a, b);
  f.Return({sum});
  EXPECT_EQ(m.ToText(),
            "module @my_module attributes {mhlo.num_partitions = 1 : i32, "
            "mhlo.num_replicas = 1 : i32} {\n"
            "  func.func public @main(%arg0: tensor<2x3xf32>, %arg1: tensor<2x3xf32>) -> "
            "(tensor<2x3xf32>) {\n"
            "    %0 = \"stablehlo.add\"(%arg0, %arg1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> "
            "tensor<2x3xf32>\n"
            "    \"func.return\"(%0) : (tensor<2x3xf32>) -> ()\n"
            "  }\n"
            "}\n");
  EXPECT_EQ(m.ArgumentTypes(), (std::vector<TensorType>{F32({2, 3}), F32({2, 3})}));
  EXPECT_EQ(m.ResultTypes(), (std::vector<TensorType>{F32({2, 3})}));
}

TEST(ModuleTest, ToTextRequiresReturn) {
  Module m;
  m.main().Argument(F32({2}));
  EXPECT_TRUE(Contains(ErrorOf([&] { (void)m.ToText(); }), "Return"));
  EXPECT_THROW((void)m.ResultTypes(), BuilderError);
}

TEST(ModuleTest, RejectsBadName) { EXPECT_THROW(Module("has space"), BuilderError); }

TEST(ModuleTest, ReturnTwiceAndOpsAfterReturnThrow) {
  Module m;
  FunctionBuilder& f = m.main();
  Value a = f.Argument(F32({2}));
  f.Return({a});
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Return({a}); }), "Return called twice"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Negate(a); }), "already has its Return"));
}

TEST(ModuleTest, ArgumentsAndOpsInterleaveWithoutChangingText) {
  auto build = [](bool interleave) {
    Module m;
    FunctionBuilder& f = m.main();
    Value a = f.Argument(F32({2}));
    Value n;
    if (interleave) n = f.Negate(a);
    Value b = f.Argument(F32({2}));
    if (!interleave) n = f.Negate(a);
    f.Return({f.Add(n, b)});
    return m.ToText();
  };
  EXPECT_EQ(build(true), build(false));
}

TEST(ModuleTest, MultipleAndZeroResults) {
  Module m;
  FunctionBuilder& f = m.main();
  Value a = f.Argument(S32({3}));
  f.Return({a, f.Negate(a)});
  EXPECT_TRUE(Contains(m.ToText(), "-> (tensor<3xi32>, tensor<3xi32>) {"));
  EXPECT_TRUE(Contains(m.ToText(), "\"func.return\"(%arg0, %0) : (tensor<3xi32>, tensor<3xi32>)"));

  Module empty;
  empty.main().Return({});
  EXPECT_TRUE(Contains(empty.ToText(), "func.func public @main() {"));
  EXPECT_TRUE(Contains(empty.ToText(), "\"func.return\"() : () -> ()"));
}

// ---- Hashing and determinism -------------------------------------------------------------------

std::unique_ptr<Module> BuildScaled(const std::string& name, double scale) {
  auto m = std::make_unique<Module>(name);
  FunctionBuilder& f = m->main();
  Value x = f.Argument(F32({4, 8}));
  Value c = f.Constant(ElementType::kF32, scale, {4, 8});
  Value y = f.Multiply(x, c);
  std::vector<Value> s = f.Reduce({y}, {f.Constant(ElementType::kF32, 0)}, {1}, AddBody);
  f.Return({s[0]});
  return m;
}

TEST(HashTest, DeterministicAndNameIndependent) {
  auto a = BuildScaled("a", 2.0);
  auto b = BuildScaled("a", 2.0);
  auto renamed = BuildScaled("other_name", 2.0);
  auto different = BuildScaled("a", 3.0);
  EXPECT_EQ(a->ToText(), b->ToText());
  EXPECT_EQ(a->StructuralHash(), b->StructuralHash());
  EXPECT_NE(a->ToText(), renamed->ToText());
  EXPECT_EQ(a->StructuralHash(), renamed->StructuralHash());
  EXPECT_NE(a->StructuralHash(), different->StructuralHash());
}

TEST(HashTest, ShapeChangesHash) {
  Module a, b;
  a.main().Return({a.main().Argument(F32({2}))});
  b.main().Return({b.main().Argument(F32({3}))});
  EXPECT_NE(a.StructuralHash(), b.StructuralHash());
}

// ---- Constants ---------------------------------------------------------------------------------

class ConstantTest : public ::testing::Test {
 protected:
  // The attribute text of a constant built by `fn`.
  template <typename Fn>
  std::string Literal(Fn&& fn) {
    Module m;
    Value v = fn(m.main());
    m.main().Return({v});
    std::string line = LineWith(m.ToText(), "stablehlo.constant");
    size_t begin = line.find("dense<");
    size_t end = line.find("}");
    return line.substr(begin, end - begin);
  }
};

TEST_F(ConstantTest, Floats) {
  EXPECT_EQ(Literal([](FunctionBuilder& f) { return f.Constant(ElementType::kF32, 1.0, {2, 3}); }),
            "dense<1.0> : tensor<2x3xf32>");
  EXPECT_EQ(Literal([](FunctionBuilder& f) { return f.Constant(ElementType::kF32, -0.5); }),
            "dense<-0.5> : tensor<f32>");
  // 0.1 is rounded to f32 first; the printed decimal is that f32 value exactly.
  EXPECT_EQ(Literal([](FunctionBuilder& f) { return f.Constant(ElementType::kF32, 0.1); }),
            "dense<0.10000000149011612> : tensor<f32>");
  EXPECT_EQ(Literal([](FunctionBuilder& f) { return f.Constant(ElementType::kF64, 0.1); }),
            "dense<0.1> : tensor<f64>");
  EXPECT_EQ(Literal([](FunctionBuilder& f) { return f.Constant(ElementType::kF64, 1e300); }),
            "dense<1.0e+300> : tensor<f64>");
  EXPECT_EQ(Literal([](FunctionBuilder& f) { return f.Constant(ElementType::kBF16, 1.0 / 3); }),
            "dense<0.333984375> : tensor<bf16>");
}

TEST_F(ConstantTest, NonFiniteAndNegativeZeroUseHex) {
  double inf = std::numeric_limits<double>::infinity();
  double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(Literal([&](FunctionBuilder& f) { return f.Constant(ElementType::kF32, inf); }),
            "dense<0x7F800000> : tensor<f32>");
  EXPECT_EQ(Literal([&](FunctionBuilder& f) { return f.Constant(ElementType::kF32, -inf); }),
            "dense<0xFF800000> : tensor<f32>");
  EXPECT_EQ(Literal([&](FunctionBuilder& f) { return f.Constant(ElementType::kF32, nan); }),
            "dense<0x7FC00000> : tensor<f32>");
  EXPECT_EQ(Literal([&](FunctionBuilder& f) { return f.Constant(ElementType::kBF16, -inf); }),
            "dense<0xFF80> : tensor<bf16>");
  EXPECT_EQ(Literal([&](FunctionBuilder& f) { return f.Constant(ElementType::kF16, inf); }),
            "dense<0x7C00> : tensor<f16>");
  EXPECT_EQ(Literal([&](FunctionBuilder& f) { return f.Constant(ElementType::kF64, inf); }),
            "dense<0x7FF0000000000000> : tensor<f64>");
  EXPECT_EQ(Literal([&](FunctionBuilder& f) { return f.Constant(ElementType::kF32, -0.0); }),
            "dense<0x80000000> : tensor<f32>");
}

TEST_F(ConstantTest, RoundingToNarrowFloats) {
  // f16 max is 65504; 65520 is the midpoint to the next (non-existent) value and rounds to inf.
  EXPECT_EQ(Literal([](FunctionBuilder& f) { return f.Constant(ElementType::kF16, 65504); }),
            "dense<65504.0> : tensor<f16>");
  EXPECT_EQ(Literal([](FunctionBuilder& f) { return f.Constant(ElementType::kF16, 65520); }),
            "dense<0x7C00> : tensor<f16>");
  // Smallest f16 subnormal, 2^-24, survives exactly.
  EXPECT_EQ(Literal([](FunctionBuilder& f) {
              return f.Constant(ElementType::kF16, std::ldexp(1.0, -24));
            }),
            "dense<5.960464477539063e-08> : tensor<f16>");
  // Ties go to even: 1 + 2^-8 lies halfway between bf16 1.0 and 1.0078125.
  EXPECT_EQ(Literal([](FunctionBuilder& f) {
              return f.Constant(ElementType::kBF16, 1.0 + std::ldexp(1.0, -8));
            }),
            "dense<1.0> : tensor<bf16>");
  EXPECT_EQ(Literal([](FunctionBuilder& f) { return f.Constant(ElementType::kF32, 1e39); }),
            "dense<0x7F800000> : tensor<f32>");
}

TEST_F(ConstantTest, IntegersAndPred) {
  EXPECT_EQ(Literal([](FunctionBuilder& f) {
              return f.ConstantInt(ElementType::kS64, std::numeric_limits<int64_t>::min());
            }),
            "dense<-9223372036854775808> : tensor<i64>");
  EXPECT_EQ(Literal([](FunctionBuilder& f) { return f.ConstantInt(ElementType::kU8, 255, {4}); }),
            "dense<255> : tensor<4xui8>");
  EXPECT_EQ(Literal([](FunctionBuilder& f) {
              return f.ConstantUnsigned(ElementType::kU64, ~uint64_t{0});
            }),
            "dense<18446744073709551615> : tensor<ui64>");
  EXPECT_EQ(Literal([](FunctionBuilder& f) { return f.Constant(ElementType::kS32, -7.0); }),
            "dense<-7> : tensor<i32>");
  EXPECT_EQ(Literal([](FunctionBuilder& f) { return f.Constant(ElementType::kPred, 1.0, {2}); }),
            "dense<true> : tensor<2xi1>");
  EXPECT_EQ(Literal([](FunctionBuilder& f) { return f.ConstantInt(ElementType::kPred, 0); }),
            "dense<false> : tensor<i1>");
  EXPECT_EQ(Literal([](FunctionBuilder& f) { return f.ConstantInt(ElementType::kF32, 3); }),
            "dense<3.0> : tensor<f32>");
}

TEST_F(ConstantTest, IntegerRangeErrors) {
  Module m;
  FunctionBuilder& f = m.main();
  EXPECT_TRUE(Contains(ErrorOf([&] { f.ConstantInt(ElementType::kU8, 256); }), "out of range"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.ConstantInt(ElementType::kU32, -1); }), "negative"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.ConstantInt(ElementType::kS8, -129); }), "out of range"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Constant(ElementType::kS32, 1.5); }), "not an integer"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Constant(ElementType::kS64, 9.3e18); }), "out of range"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.ConstantUnsigned(ElementType::kS64, ~uint64_t{0}); }),
              "out of range"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Constant(ElementType::kF32, 1, {-1}); }), "negative"));
}

TEST_F(ConstantTest, Dense) {
  std::vector<double> values{1, 2.5, -3, 4, 5, 6};
  EXPECT_EQ(Literal([&](FunctionBuilder& f) { return f.ConstantDense(F32({2, 3}), values); }),
            "dense<[[1.0, 2.5, -3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>");
  std::vector<int64_t> ints{7, -8};
  EXPECT_EQ(Literal([&](FunctionBuilder& f) { return f.ConstantDenseInt(S32({2}), ints); }),
            "dense<[7, -8]> : tensor<2xi32>");
  std::vector<double> one{4};
  EXPECT_EQ(Literal([&](FunctionBuilder& f) { return f.ConstantDense(S32({}), one); }),
            "dense<4> : tensor<i32>");
  EXPECT_EQ(Literal([&](FunctionBuilder& f) {
              return f.ConstantDense(F32({0, 2}), std::span<const double>());
            }),
            "dense<> : tensor<0x2xf32>");
  Module m;
  EXPECT_TRUE(Contains(ErrorOf([&] { m.main().ConstantDense(F32({2, 2}), values); }),
              "6 values given for type tensor<2x2xf32>"));
}

TEST(BuilderTest, Iota) {
  Module m;
  FunctionBuilder& f = m.main();
  Value v = f.Iota(S32({3, 4}), 1);
  EXPECT_EQ(v.type(), S32({3, 4}));
  f.Return({v});
  EXPECT_EQ(LineWith(m.ToText(), "iota"),
            "%0 = \"stablehlo.iota\"() {iota_dimension = 1 : i64} : () -> tensor<3x4xi32>");
  EXPECT_THROW(f.Iota(S32({3}), 1), BuilderError);
  Module m2;
  EXPECT_TRUE(Contains(ErrorOf([&] { m2.main().Iota(S32({3}), 1); }), "iota_dimension 1"));
  EXPECT_THROW(m2.main().Iota({ElementType::kPred, {3}}, 0), BuilderError);
}

// ---- Elementwise -------------------------------------------------------------------------------

TEST(BuilderTest, ElementwiseOpNamesAndTypes) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({2, 2}));
  Value i = f.Argument(S32({2, 2}));
  Value u = f.Argument({ElementType::kU32, {2, 2}});
  EXPECT_EQ(f.Exp(x).type(), F32({2, 2}));
  f.Expm1(x);
  f.Log1p(x);
  f.Logistic(x);
  f.RoundNearestAfz(x);
  f.Tan(x);
  f.ShiftRightLogical(u, u);
  f.PopulationCount(i);
  f.Atan2(x, x);
  Value finite = f.IsFinite(x);
  EXPECT_EQ(finite.type(), TensorType({ElementType::kPred, {2, 2}}));
  f.Return({finite});
  std::string text = m.ToText();
  for (const char* op : {"stablehlo.exponential\"", "stablehlo.exponential_minus_one\"",
                         "stablehlo.log_plus_one\"", "stablehlo.logistic\"",
                         "stablehlo.round_nearest_afz\"", "stablehlo.tan\"",
                         "stablehlo.shift_right_logical\"", "stablehlo.popcnt\"",
                         "stablehlo.atan2\"", "stablehlo.is_finite\""}) {
    EXPECT_TRUE(Contains(text, op));
  }
  EXPECT_TRUE(Contains(text, "\"stablehlo.is_finite\"(%arg0) : (tensor<2x2xf32>) -> "
                              "tensor<2x2xi1>"));
}

TEST(BuilderTest, ElementwiseTypeErrors) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({2, 3}));
  Value y = f.Argument(F32({3, 2}));
  Value i = f.Argument(S32({2, 3}));
  Value p = f.Argument({ElementType::kPred, {2, 3}});
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Add(x, i); }),
              "stablehlo.add: operand types tensor<2x3xf32> and tensor<2x3xi32> differ"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Multiply(x, y); }), "differ"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Exp(i); }), "stablehlo.exponential: operand type "
                                                    "tensor<2x3xi32>"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.And(x, x); }), "expected pred or integer"));
  EXPECT_THROW(f.ShiftLeft(x, x), BuilderError);
  EXPECT_THROW(f.Subtract(p, p), BuilderError);
  EXPECT_THROW(f.Abs(f.Argument({ElementType::kU8, {2}})), BuilderError);
  EXPECT_NO_THROW(f.Add(p, p));
  EXPECT_NO_THROW(f.Not(p));
  EXPECT_THROW(f.IsFinite(i), BuilderError);
}

TEST(BuilderTest, ValuesFromOtherBuildersAreRejected) {
  Module a, b;
  Value x = a.main().Argument(F32({2}));
  Value y = b.main().Argument(F32({2}));
  EXPECT_TRUE(Contains(ErrorOf([&] { a.main().Add(x, y); }), "different builder"));
  EXPECT_TRUE(Contains(ErrorOf([&] { b.main().Return({x}); }), "different builder"));
  EXPECT_TRUE(Contains(ErrorOf([&] { a.main().Negate(Value()); }), "invalid"));
}

TEST(BuilderTest, Clamp) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({2, 3}));
  Value lo = f.Constant(ElementType::kF32, 0);
  Value hi = f.Argument(F32({2, 3}));
  EXPECT_EQ(f.Clamp(lo, x, hi).type(), F32({2, 3}));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Clamp(f.Constant(ElementType::kF32, 0, {3}), x, hi); }),
              "scalars or have the operand's shape"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Clamp(f.ConstantInt(ElementType::kS32, 0), x, hi); }),
              "element types differ"));
}

TEST(BuilderTest, CompareTypes) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({2, 3}));
  Value i = f.Argument(S32({2}));
  Value u = f.Argument({ElementType::kU8, {2}});
  Value p = f.Argument({ElementType::kPred, {2}});
  Value c = f.Compare(x, x, Dir::kLt);
  EXPECT_EQ(c.type(), TensorType({ElementType::kPred, {2, 3}}));
  f.Compare(x, x, Dir::kEq, /*total_order=*/true);
  f.Compare(i, i, Dir::kGe);
  f.Compare(u, u, Dir::kNe);
  f.Compare(p, p, Dir::kGt);
  EXPECT_THROW(f.Compare(i, i, Dir::kEq, true), BuilderError);
  EXPECT_THROW(f.Compare(i, u, Dir::kEq), BuilderError);
  f.Return({c});
  std::string text = m.ToText();
  EXPECT_TRUE(Contains(text, "%0 = \"stablehlo.compare\"(%arg0, %arg0) {comparison_direction = "
                              "#stablehlo<comparison_direction LT>, compare_type = "
                              "#stablehlo<comparison_type FLOAT>} : (tensor<2x3xf32>, "
                              "tensor<2x3xf32>) -> tensor<2x3xi1>"));
  EXPECT_TRUE(Contains(text, "comparison_direction EQ>, compare_type = "
                              "#stablehlo<comparison_type TOTALORDER>"));
  EXPECT_TRUE(Contains(text, "comparison_direction GE>, compare_type = "
                              "#stablehlo<comparison_type SIGNED>"));
  EXPECT_TRUE(Contains(text, "comparison_direction NE>, compare_type = "
                              "#stablehlo<comparison_type UNSIGNED>"));
  EXPECT_TRUE(Contains(text, "comparison_direction GT>, compare_type = "
                              "#stablehlo<comparison_type UNSIGNED>"));
}

TEST(BuilderTest, Select) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({2, 3}));
  Value p = f.Compare(x, x, Dir::kGt);
  EXPECT_EQ(f.Select(p, x, x).type(), F32({2, 3}));
  EXPECT_EQ(f.Select(f.Constant(ElementType::kPred, 1), x, x).type(), F32({2, 3}));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Select(x, x, x); }), "not of element type i1"));
  EXPECT_THROW(f.Select(p, x, f.Argument(F32({3, 2}))), BuilderError);
  EXPECT_THROW(f.Select(f.Constant(ElementType::kPred, 1, {2}), x, x), BuilderError);
}

// ---- Conversions and shapes --------------------------------------------------------------------

TEST(BuilderTest, ConvertAndBitcast) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({2, 3}));
  Value c = f.Convert(x, ElementType::kBF16);
  EXPECT_EQ(c.type(), TensorType({ElementType::kBF16, {2, 3}}));
  Value b = f.BitcastConvert(x, ElementType::kU32);
  EXPECT_EQ(b.type(), TensorType({ElementType::kU32, {2, 3}}));
  f.Return({c});
  EXPECT_TRUE(Contains(m.ToText(), "%0 = \"stablehlo.convert\"(%arg0) : (tensor<2x3xf32>) -> "
                                    "tensor<2x3xbf16>"));
}

TEST(BuilderTest, BitcastChangingWidth) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({2, 3}));
  // Wider to narrower appends the ratio as a trailing dimension.
  Value bytes = f.BitcastConvert(x, ElementType::kU8);
  EXPECT_EQ(bytes.type(), TensorType({ElementType::kU8, {2, 3, 4}}));
  EXPECT_EQ(f.BitcastConvert(x, ElementType::kBF16).type(),
            TensorType({ElementType::kBF16, {2, 3, 2}}));
  Value scalar = f.Argument({ElementType::kF64, {}});
  EXPECT_EQ(f.BitcastConvert(scalar, ElementType::kS16).type(),
            TensorType({ElementType::kS16, {4}}));
  // Narrower to wider removes it again.
  Value back = f.BitcastConvert(bytes, ElementType::kF32);
  EXPECT_EQ(back.type(), F32({2, 3}));
  EXPECT_EQ(f.BitcastConvert(f.Argument({ElementType::kU8, {3, 2}}), ElementType::kU16).type(),
            TensorType({ElementType::kU16, {3}}));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.BitcastConvert(bytes, ElementType::kU16); }),
                       "last operand dimension of size 2"));
  EXPECT_EQ(f.BitcastConvert(f.Argument({ElementType::kU8, {8}}), ElementType::kS64).type(),
            TensorType({ElementType::kS64, {}}));
  std::string error = ErrorOf([&] { f.BitcastConvert(bytes, ElementType::kF64); });
  EXPECT_TRUE(Contains(error, "stablehlo.bitcast_convert"));
  EXPECT_TRUE(Contains(error, "tensor<2x3x4xui8>"));
  EXPECT_TRUE(Contains(error, "last operand dimension of size 8"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.BitcastConvert(f.Argument({ElementType::kU8, {}}),
                                                      ElementType::kU16); }),
                       "last operand dimension of size 2"));
  // pred has no byte layout to split or merge; pred to pred stays allowed.
  Value p = f.Argument({ElementType::kPred, {4}});
  EXPECT_TRUE(Contains(ErrorOf([&] { f.BitcastConvert(p, ElementType::kU8); }), "pred"));
  EXPECT_THROW(f.BitcastConvert(f.Argument({ElementType::kU8, {1}}), ElementType::kPred),
               BuilderError);
  EXPECT_EQ(f.BitcastConvert(p, ElementType::kPred).type(), p.type());
  f.Return({back});
  EXPECT_TRUE(Contains(m.ToText(), "%0 = \"stablehlo.bitcast_convert\"(%arg0) : (tensor<2x3xf32>) "
                                    "-> tensor<2x3x4xui8>"));
}

TEST(BuilderTest, BroadcastInDim) {
  Module m;
  FunctionBuilder& f = m.main();
  Value v = f.Argument(F32({3}));
  Value b = f.BroadcastInDim(v, {2, 3}, {1});
  EXPECT_EQ(b.type(), F32({2, 3}));
  Value ones = f.Argument(F32({1, 3}));
  EXPECT_EQ(f.BroadcastInDim(ones, {4, 5, 3}, {0, 2}).type(), F32({4, 5, 3}));
  EXPECT_EQ(f.BroadcastInDim(f.Constant(ElementType::kF32, 1), {2, 2}, {}).type(), F32({2, 2}));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.BroadcastInDim(v, {2, 3}, {0}); }),
              "must be 1 or equal result dimension 0"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.BroadcastInDim(v, {2, 3}, {2}); }), "out of range"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.BroadcastInDim(v, {2, 3}, {}); }), "one entry per"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.BroadcastInDim(ones, {3, 3}, {1, 1}); }), "repeats"));
  f.Return({b});
  EXPECT_TRUE(Contains(m.ToText(),
              "%0 = \"stablehlo.broadcast_in_dim\"(%arg0) {broadcast_dimensions = "
                        "array<i64: 1>} : (tensor<3xf32>) -> tensor<2x3xf32>"));
  EXPECT_TRUE(Contains(m.ToText(), "{broadcast_dimensions = array<i64>}"));
}

TEST(BuilderTest, ReshapeAndTranspose) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({2, 3, 4}));
  EXPECT_EQ(f.Reshape(x, {6, 4}).type(), F32({6, 4}));
  EXPECT_EQ(f.Reshape(f.Argument(F32({1})), {}).type(), F32({}));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Reshape(x, {5, 5}); }), "element counts differ"));
  Value t = f.Transpose(x, {2, 0, 1});
  EXPECT_EQ(t.type(), F32({4, 2, 3}));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Transpose(x, {0, 0, 1}); }), "repeats dimension 0"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Transpose(x, {0, 1}); }), "one entry per"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Transpose(x, {0, 1, 3}); }), "out of range"));
  f.Return({t});
  EXPECT_TRUE(Contains(m.ToText(), "\"stablehlo.transpose\"(%arg0) {permutation = array<i64: 2, "
                                    "0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>"));
}

TEST(BuilderTest, Slice) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({10, 4}));
  Value s = f.Slice(x, {1, 0}, {8, 4}, {3, 1});
  EXPECT_EQ(s.type(), F32({3, 4}));  // rows 1, 4, 7
  EXPECT_EQ(f.Slice(x, {2, 2}, {2, 4}, {1, 1}).type(), F32({0, 2}));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Slice(x, {0, 0}, {11, 4}, {1, 1}); }),
              "0 <= start <= limit <= size"));
  EXPECT_THROW(f.Slice(x, {5, 0}, {4, 4}, {1, 1}), BuilderError);
  EXPECT_THROW(f.Slice(x, {0, 0}, {4, 4}, {0, 1}), BuilderError);
  EXPECT_THROW(f.Slice(x, {0}, {4}, {1}), BuilderError);
  f.Return({s});
  EXPECT_TRUE(Contains(m.ToText(), "{start_indices = array<i64: 1, 0>, limit_indices = "
                                    "array<i64: 8, 4>, strides = array<i64: 3, 1>}"));
}

TEST(BuilderTest, DynamicSliceAndUpdate) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({8, 4}));
  Value i = f.ConstantInt(ElementType::kS32, 2);
  Value j = f.ConstantInt(ElementType::kS32, 0);
  Value s = f.DynamicSlice(x, {i, j}, {3, 4});
  EXPECT_EQ(s.type(), F32({3, 4}));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.DynamicSlice(x, {i, j}, {9, 4}); }), "out of bounds"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.DynamicSlice(x, {i}, {1, 1}); }), "1 start indices"));
  Value i64 = f.ConstantInt(ElementType::kS64, 0);
  EXPECT_TRUE(Contains(ErrorOf([&] { f.DynamicSlice(x, {i, i64}, {1, 1}); }),
              "different types"));
  Value f32 = f.Constant(ElementType::kF32, 0);
  EXPECT_TRUE(Contains(ErrorOf([&] { f.DynamicSlice(x, {i, f32}, {1, 1}); }),
              "not an integer scalar"));
  Value u = f.DynamicUpdateSlice(x, s, {i, j});
  EXPECT_EQ(u.type(), F32({8, 4}));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.DynamicUpdateSlice(s, x, {i, j}); }), "larger"));
  EXPECT_THROW(f.DynamicUpdateSlice(x, f.Argument(S32({1, 1})), {i, j}), BuilderError);
  f.Return({u});
  EXPECT_TRUE(Contains(m.ToText(), "%2 = \"stablehlo.dynamic_slice\"(%arg0, %0, %1) {slice_sizes "
                                    "= array<i64: 3, 4>} : (tensor<8x4xf32>, tensor<i32>, "
                                    "tensor<i32>) -> tensor<3x4xf32>"));
}

TEST(BuilderTest, Concatenate) {
  Module m;
  FunctionBuilder& f = m.main();
  Value a = f.Argument(F32({2, 3}));
  Value b = f.Argument(F32({5, 3}));
  Value c = f.Concatenate({a, b, a}, 0);
  EXPECT_EQ(c.type(), F32({9, 3}));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Concatenate({a, b}, 1); }), "all dimensions except 1"));
  EXPECT_THROW(f.Concatenate({a, f.Argument(S32({2, 3}))}, 0), BuilderError);
  EXPECT_THROW(f.Concatenate({a}, 2), BuilderError);
  EXPECT_THROW(f.Concatenate({}, 0), BuilderError);
  f.Return({c});
  EXPECT_TRUE(Contains(m.ToText(), "\"stablehlo.concatenate\"(%arg0, %arg1, %arg0) {dimension = "
                                    "0 : i64} : (tensor<2x3xf32>, tensor<5x3xf32>, "
                                    "tensor<2x3xf32>) -> tensor<9x3xf32>"));
}

TEST(BuilderTest, Pad) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({3, 4}));
  Value zero = f.Constant(ElementType::kF32, 0);
  Value p = f.Pad(x, zero, {1, 0}, {2, -1}, {1, 0});
  // dim 0: 1 + 2 + 3 + 2 * 1 = 8; dim 1: 0 - 1 + 4 = 3.
  EXPECT_EQ(p.type(), F32({8, 3}));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Pad(x, x, {0, 0}, {0, 0}, {0, 0}); }), "scalar"));
  EXPECT_THROW(f.Pad(x, zero, {0, 0}, {0, 0}, {-1, 0}), BuilderError);
  EXPECT_THROW(f.Pad(x, zero, {0, -5}, {0, 0}, {0, 0}), BuilderError);
  EXPECT_THROW(f.Pad(x, zero, {0}, {0}, {0}), BuilderError);
  f.Return({p});
  EXPECT_TRUE(Contains(m.ToText(), "{edge_padding_low = array<i64: 1, 0>, edge_padding_high = "
                                    "array<i64: 2, -1>, interior_padding = array<i64: 1, 0>} : "
                                    "(tensor<3x4xf32>, tensor<f32>) -> tensor<8x3xf32>"));
}

TEST(BuilderTest, Reverse) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({3, 4}));
  Value r = f.Reverse(x, {1});
  EXPECT_EQ(r.type(), F32({3, 4}));
  EXPECT_THROW(f.Reverse(x, {2}), BuilderError);
  EXPECT_THROW(f.Reverse(x, {0, 0}), BuilderError);
  f.Return({r});
  EXPECT_TRUE(Contains(m.ToText(), "{dimensions = array<i64: 1>}"));
}

TEST(BuilderTest, CholeskyAndTriangularSolve) {
  Module m;
  FunctionBuilder& f = m.main();
  Value a = f.Argument(F32({2, 3, 3}));
  Value b = f.Argument(F32({2, 3, 4}));
  Value l = f.Cholesky(a, /*lower=*/true);
  EXPECT_EQ(l.type(), F32({2, 3, 3}));
  Value x = f.TriangularSolve(l, b, /*left_side=*/true, /*lower=*/true, /*unit_diagonal=*/false,
                              FunctionBuilder::TransposeA::kTranspose);
  EXPECT_EQ(x.type(), F32({2, 3, 4}));
  EXPECT_THROW(f.Cholesky(b, true), BuilderError);  // not square
  EXPECT_THROW(f.Cholesky(f.Argument(S32({3, 3})), true), BuilderError);
  EXPECT_THROW(f.TriangularSolve(l, b, /*left_side=*/false, true, false,
                                 FunctionBuilder::TransposeA::kNoTranspose),
               BuilderError);  // b's last dim is 4, a is 3x3
  EXPECT_TRUE(Contains(ErrorOf([&] {
                         f.TriangularSolve(l, f.Argument(F32({1, 3, 4})), true, true, false,
                                           FunctionBuilder::TransposeA::kNoTranspose);
                       }),
                       "batch dims"));
  f.Return({x});
  EXPECT_TRUE(Contains(m.ToText(), "{lower = true}"));
  EXPECT_TRUE(Contains(m.ToText(),
                       "left_side = true, lower = true, unit_diagonal = false, transpose_a = "
                       "#stablehlo<transpose TRANSPOSE>"));
}

TEST(BuilderTest, DotGeneral) {
  Module m;
  FunctionBuilder& f = m.main();
  Value lhs = f.Argument(F32({8, 2, 5, 3}));
  Value rhs = f.Argument(F32({8, 3, 7}));
  FunctionBuilder::DotDimensions dims{{0}, {0}, {3}, {1}};
  Value d = f.DotGeneral(lhs, rhs, dims);
  EXPECT_EQ(d.type(), F32({8, 2, 5, 7}));
  Value mm = f.DotGeneral(f.Argument(F32({4, 3})), f.Argument(F32({3, 2})), {{}, {}, {1}, {0}},
                          ElementType::kF32, FunctionBuilder::Precision::kHighest);
  EXPECT_EQ(mm.type(), F32({4, 2}));
  EXPECT_EQ(f.DotGeneral(f.Argument(F32({2})), f.Argument(F32({3})), {}).type(), F32({2, 3}));
  Value bf = f.Argument({ElementType::kBF16, {4, 3}});
  EXPECT_EQ(f.DotGeneral(bf, bf, {{}, {}, {1}, {1}}, ElementType::kF32).type(), F32({4, 4}));

  EXPECT_TRUE(Contains(ErrorOf([&] { f.DotGeneral(lhs, rhs, {{0}, {0}, {2}, {1}}); }),
              "contracting dimension sizes differ"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.DotGeneral(lhs, rhs, {{1}, {0}, {3}, {1}}); }),
              "batch dimension sizes differ"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.DotGeneral(lhs, rhs, {{0}, {}, {3}, {1}}); }),
              "same number of batch"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.DotGeneral(lhs, rhs, {{0}, {0}, {0}, {1}}); }),
              "more than once"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.DotGeneral(lhs, f.Argument(S32({8, 3, 7})), dims); }),
              "element types differ"));
  f.Return({d, mm});
  std::string text = m.ToText();
  EXPECT_TRUE(Contains(text, "%0 = \"stablehlo.dot_general\"(%arg0, %arg1) "
                              "{dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = "
                              "[0], rhs_batching_dimensions = [0], lhs_contracting_dimensions = "
                              "[3], rhs_contracting_dimensions = [1]>, precision_config = "
                              "[#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : "
                              "(tensor<8x2x5x3xf32>, tensor<8x3x7xf32>) -> tensor<8x2x5x7xf32>"));
  EXPECT_TRUE(Contains(text, "{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions"
                              " = [1], rhs_contracting_dimensions = [0]>, precision_config = "
                              "[#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]}"));
}

// ---- Regions -----------------------------------------------------------------------------------

TEST(BuilderTest, ReduceText) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({2, 3}));
  Value init = f.Constant(ElementType::kF32, 0);
  std::vector<Value> r = f.Reduce({x}, {init}, {1}, AddBody);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].type(), F32({2}));
  f.Return(r);
  EXPECT_EQ(m.ToText(),
            "module @torch_tpu attributes {mhlo.num_partitions = 1 : i32, "
            "mhlo.num_replicas = 1 : i32} {\n"
            "  func.func public @main(%arg0: tensor<2x3xf32>) -> (tensor<2xf32>) {\n"
            "    %0 = \"stablehlo.constant\"() {value = dense<0.0> : tensor<f32>} : () -> "
            "tensor<f32>\n"
            "    %4 = \"stablehlo.reduce\"(%arg0, %0) ({\n"
            "    ^bb0(%b1: tensor<f32>, %b2: tensor<f32>):\n"
            "      %3 = \"stablehlo.add\"(%b1, %b2) : (tensor<f32>, tensor<f32>) -> tensor<f32>\n"
            "      \"stablehlo.return\"(%3) : (tensor<f32>) -> ()\n"
            "    }) {dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> "
            "tensor<2xf32>\n"
            "    \"func.return\"(%4) : (tensor<2xf32>) -> ()\n"
            "  }\n"
            "}\n");
}

TEST(BuilderTest, VariadicReduceArgmax) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({4, 5}));
  Value idx = f.Iota(S32({4, 5}), 1);
  auto body = [](FunctionBuilder& b, std::span<const Value> a) -> std::vector<Value> {
    // a = (acc_value, acc_index, value, index)
    Value take = b.Compare(a[2], a[0], Dir::kGt);
    return {b.Select(take, a[2], a[0]), b.Select(take, a[3], a[1])};
  };
  Value init_value = f.Constant(ElementType::kF32, -INFINITY);
  Value init_index = f.ConstantInt(ElementType::kS32, 0);
  std::vector<Value> r = f.Reduce({x, idx}, {init_value, init_index}, {1}, body);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].type(), F32({4}));
  EXPECT_EQ(r[1].type(), S32({4}));
  f.Return(r);
  std::string text = m.ToText();
  EXPECT_TRUE(Contains(text, ":2 = \"stablehlo.reduce\"(%arg0, %0, %1, %2) ({"));
  EXPECT_TRUE(Contains(text, "-> (tensor<4xf32>, tensor<4xi32>)"));
  EXPECT_TRUE(Contains(text, "\"func.return\"(%10#0, %10#1)"));
  EXPECT_TRUE(Contains(text, "dense<0xFF800000> : tensor<f32>"));
}

TEST(BuilderTest, ReduceErrors) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({2, 3}));
  Value init = f.Constant(ElementType::kF32, 0);
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Reduce({x}, {init}, {2}, AddBody); }), "out of range"));
  Value int_init = f.ConstantInt(ElementType::kS32, 0);
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Reduce({x}, {int_init}, {0}, AddBody); }),
              "scalar of its input's element type"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Reduce({x}, {}, {0}, AddBody); }), "one init value"));
  // The body may not capture values of the enclosing function.
  EXPECT_TRUE(Contains(ErrorOf([&] {
                f.Reduce({x}, {init}, {0}, [&](FunctionBuilder& b, std::span<const Value> a) {
                  return std::vector<Value>{b.Add(a[0], init)};
                });
              }),
              "different builder"));
  // Wrong body result type.
  EXPECT_TRUE(Contains(ErrorOf([&] {
                f.Reduce({x}, {init}, {0}, [](FunctionBuilder& b, std::span<const Value> a) {
                  return std::vector<Value>{b.Compare(a[0], a[1], Dir::kLt)};
                });
              }),
              "region body returned (tensor<i1>) but must return (tensor<f32>)"));
  // The failed attempts left nothing behind in @main.
  f.Return({x});
  EXPECT_EQ(m.ToText().find("stablehlo.reduce"), std::string::npos);
}

TEST(BuilderTest, ReduceWindow) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({1, 6, 6}));
  Value init = f.Constant(ElementType::kF32, -INFINITY);
  auto max_body = [](FunctionBuilder& b, std::span<const Value> a) {
    return std::vector<Value>{b.Maximum(a[0], a[1])};
  };
  std::vector<Value> r =
      f.ReduceWindow({x}, {init}, {1, 3, 3}, {1, 2, 2}, {}, {}, {{0, 0}, {1, 1}, {1, 1}}, max_body);
  // (6 + 2 - 3) / 2 + 1 = 3
  EXPECT_EQ(r[0].type(), F32({1, 3, 3}));
  std::vector<Value> dilated =
      f.ReduceWindow({x}, {init}, {1, 2, 2}, {}, {1, 2, 1}, {1, 1, 2}, {}, max_body);
  // dim 1: input 11, window 2 -> 10; dim 2: input 6, window 3 -> 4
  EXPECT_EQ(dilated[0].type(), F32({1, 10, 4}));
  EXPECT_THROW(f.ReduceWindow({x}, {init}, {1, 3}, {}, {}, {}, {}, max_body), BuilderError);
  EXPECT_THROW(f.ReduceWindow({x}, {init}, {1, 0, 3}, {}, {}, {}, {}, max_body), BuilderError);
  f.Return(r);
  EXPECT_TRUE(Contains(m.ToText(), "{window_dimensions = array<i64: 1, 3, 3>, window_strides = "
                                    "array<i64: 1, 2, 2>, base_dilations = array<i64: 1, 1, 1>, "
                                    "window_dilations = array<i64: 1, 1, 1>, padding = dense<[[0, "
                                    "0], [1, 1], [1, 1]]> : tensor<3x2xi64>}"));
}

TEST(BuilderTest, Sort) {
  Module m;
  FunctionBuilder& f = m.main();
  Value keys = f.Argument(F32({4, 5}));
  Value vals = f.Argument(S32({4, 5}));
  auto less = [](FunctionBuilder& b, std::span<const Value> a) {
    EXPECT_EQ(a.size(), 4u);
    return std::vector<Value>{b.Compare(a[0], a[1], Dir::kLt)};
  };
  std::vector<Value> r = f.Sort({keys, vals}, 1, true, less);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].type(), S32({4, 5}));
  EXPECT_THROW(f.Sort({keys}, 2, false, less), BuilderError);
  EXPECT_TRUE(Contains(ErrorOf([&] {
                f.Sort({keys}, 0, false, [](FunctionBuilder&, std::span<const Value> a) {
                  return std::vector<Value>{a[0]};
                });
              }),
              "must return (tensor<i1>)"));
  f.Return(r);
  EXPECT_TRUE(Contains(m.ToText(), "{dimension = 1 : i64, is_stable = true} : (tensor<4x5xf32>, "
                                    "tensor<4x5xi32>) -> (tensor<4x5xf32>, tensor<4x5xi32>)"));
}

TEST(BuilderTest, WhileHasConditionAndBodyRegions) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({3}));
  Value zero = f.ConstantInt(ElementType::kS32, 0);
  auto below_four = [](FunctionBuilder& b, std::span<const Value> a) {
    return std::vector<Value>{b.Compare(a[0], b.ConstantInt(ElementType::kS32, 4), Dir::kLt)};
  };
  auto step = [](FunctionBuilder& b, std::span<const Value> a) {
    return std::vector<Value>{b.Add(a[0], b.ConstantInt(ElementType::kS32, 1)), b.Add(a[1], a[1])};
  };
  std::vector<Value> r = f.While({zero, x}, below_four, step);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].type(), F32({3}));
  // The condition must yield one pred; the body must yield the carried types.
  EXPECT_TRUE(Contains(ErrorOf([&] { f.While({zero, x}, step, step); }), "must return (tensor<i1>)"));
  EXPECT_TRUE(Contains(ErrorOf([&] {
                f.While({zero, x}, below_four, [](FunctionBuilder&, std::span<const Value> a) {
                  return std::vector<Value>{a[1], a[0]};
                });
              }),
              "must return (tensor<i32>, tensor<3xf32>)"));
  EXPECT_THROW(f.While({}, below_four, step), BuilderError);
  f.Return({r[1]});
  const std::string text = m.ToText();
  EXPECT_TRUE(Contains(text, "\"stablehlo.while\"("));
  EXPECT_TRUE(Contains(text, "}, {"));
  EXPECT_TRUE(Contains(text, "}) : (tensor<i32>, tensor<3xf32>) -> (tensor<i32>, tensor<3xf32>)"));
}

TEST(BuilderTest, ForLoopWithoutTripsEmitsNoLoop) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({2}));
  std::vector<Value> r = ForLoop(f, 3, 3, {x}, [](FunctionBuilder& b, Value, std::span<const Value> a) {
    return std::vector<Value>{b.Add(a[0], a[0])};
  });
  EXPECT_EQ(r[0].id(), x.id());
  EXPECT_THROW(ForLoop(f, 0, int64_t{1} << 40, {x}, nullptr), BuilderError);
  f.Return(r);
  EXPECT_FALSE(Contains(m.ToText(), "stablehlo.while"));
}

TEST(BuilderTest, NestedRegionNamesAreUnique) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({2, 3, 4}));
  // Reduce whose body itself contains a reduce: names must stay unique across nesting levels.
  auto inner_reduce = [](FunctionBuilder& b, std::span<const Value> a) {
    Value v = b.BroadcastInDim(a[1], {2}, {});
    std::vector<Value> s = b.Reduce({v}, {a[0]}, {0}, AddBody);
    return s;
  };
  std::vector<Value> r = f.Reduce({x}, {f.Constant(ElementType::kF32, 0)}, {0, 2}, inner_reduce);
  EXPECT_EQ(r[0].type(), F32({3}));
  f.Return(r);
  std::string text = m.ToText();
  std::vector<std::string> defined;
  for (size_t pos = 0; (pos = text.find('%', pos)) != std::string::npos; ++pos) {
    size_t end = text.find_first_of(" :=)", pos);
    std::string rest = text.substr(end, 3);
    if (rest.starts_with(" = ") || rest.starts_with(": t")) {
      defined.push_back(text.substr(pos, end - pos));
    }
  }
  std::vector<std::string> sorted = defined;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << text;
  EXPECT_GE(defined.size(), 8u) << text;
}

TEST(BuilderTest, RegionBuilderRestrictions) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({2}));
  Value init = f.Constant(ElementType::kF32, 0);
  EXPECT_TRUE(Contains(ErrorOf([&] {
                f.Reduce({x}, {init}, {0}, [](FunctionBuilder& b, std::span<const Value> a) {
                  b.Argument(F32({}));
                  return std::vector<Value>{a[0]};
                });
              }),
              "region builders"));
  EXPECT_TRUE(Contains(ErrorOf([&] {
                f.Reduce({x}, {init}, {0}, [](FunctionBuilder& b, std::span<const Value> a) {
                  b.Return({a[0]});
                  return std::vector<Value>{a[0]};
                });
              }),
              "instead of calling Return"));
}

TEST(BuilderTest, StaleRegionValuesAreRejected) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({2}));
  Value init = f.Constant(ElementType::kF32, 0);
  Value leaked;
  f.Reduce({x}, {init}, {0}, [&](FunctionBuilder& b, std::span<const Value> a) {
    leaked = a[0];
    return std::vector<Value>{b.Add(a[0], a[1])};
  });
  // A later region builder may sit at the same address as the finished one; the leaked value
  // must still be recognized as foreign.
  EXPECT_TRUE(Contains(ErrorOf([&] {
                f.Reduce({x}, {init}, {0}, [&](FunctionBuilder& b, std::span<const Value> a) {
                  return std::vector<Value>{b.Add(leaked, a[1])};
                });
              }),
              "different builder"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Negate(leaked); }), "different builder"));
}

TEST(BuilderTest, RngBitGenerator) {
  Module m;
  FunctionBuilder& f = m.main();
  Value state = f.Argument({ElementType::kU64, {2}});
  auto [new_state, bits] = f.RngBitGenerator(state, {ElementType::kU32, {3, 4}},
                                             FunctionBuilder::RngAlgorithm::kThreeFry);
  EXPECT_EQ(new_state.type(), TensorType({ElementType::kU64, {2}}));
  EXPECT_EQ(bits.type(), TensorType({ElementType::kU32, {3, 4}}));
  Value s32_state = f.Argument(S32({2}));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.RngBitGenerator(s32_state, {ElementType::kU32, {3}}); }),
              "rank-1 ui64"));
  EXPECT_THROW(f.RngBitGenerator(f.Argument({ElementType::kU64, {3}}), {ElementType::kU32, {3}},
                                 FunctionBuilder::RngAlgorithm::kThreeFry),
               BuilderError);
  EXPECT_THROW(f.RngBitGenerator(state, {ElementType::kPred, {3}}), BuilderError);
  f.Return({new_state, bits});
  EXPECT_TRUE(Contains(m.ToText(), "%0:2 = \"stablehlo.rng_bit_generator\"(%arg0) {rng_algorithm "
                                    "= #stablehlo<rng_algorithm THREE_FRY>} : (tensor<2xui64>) -> "
                                    "(tensor<2xui64>, tensor<3x4xui32>)"));
  EXPECT_TRUE(Contains(m.ToText(), "\"func.return\"(%0#0, %0#1)"));
}

// ---- Gather / scatter --------------------------------------------------------------------------

TEST(BuilderTest, GatherRowsText) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({5, 3}));
  Value idx = f.Argument(S32({4, 1}));
  FunctionBuilder::GatherDimensions d;
  d.offset_dims = {1};
  d.collapsed_slice_dims = {0};
  d.start_index_map = {0};
  d.index_vector_dim = 1;
  Value g = f.Gather(x, idx, d, {1, 3});
  EXPECT_EQ(g.type(), F32({4, 3}));
  f.Return({g});
  EXPECT_TRUE(Contains(
      m.ToText(),
      "%0 = \"stablehlo.gather\"(%arg0, %arg1) {dimension_numbers = #stablehlo.gather<offset_dims "
      "= [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, "
      "slice_sizes = array<i64: 1, 3>, indices_are_sorted = false} : (tensor<5x3xf32>, "
      "tensor<4x1xi32>) -> tensor<4x3xf32>"));
}

TEST(BuilderTest, GatherInferredShapes) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({2, 3, 4, 2}));
  // Batch dims [2, 2, 3] (index_vector_dim 3 removed), offset dims [2, 2] (slice_sizes without
  // collapsed dim 1 and batching dim 0) at result positions 3 and 4.
  Value idx = f.Argument({ElementType::kS64, {2, 2, 3, 2}});
  FunctionBuilder::GatherDimensions d;
  d.offset_dims = {3, 4};
  d.collapsed_slice_dims = {1};
  d.operand_batching_dims = {0};
  d.start_indices_batching_dims = {1};
  d.start_index_map = {2, 1};
  d.index_vector_dim = 3;
  Value g = f.Gather(x, idx, d, {1, 1, 2, 2}, true);
  EXPECT_EQ(g.type(), F32({2, 2, 3, 2, 2}));
  // Implicit trailing index vector: every index element is one start index.
  Value flat = f.Argument(F32({10}));
  Value grid = f.Argument({ElementType::kU32, {2, 3}});
  FunctionBuilder::GatherDimensions d1;
  d1.collapsed_slice_dims = {0};
  d1.start_index_map = {0};
  d1.index_vector_dim = 2;
  EXPECT_EQ(f.Gather(flat, grid, d1, {1}).type(), F32({2, 3}));
  // Offset dims may come first.
  FunctionBuilder::GatherDimensions d2;
  d2.offset_dims = {0};
  d2.start_index_map = {0};
  d2.index_vector_dim = 1;
  EXPECT_EQ(f.Gather(flat, f.Argument(S32({7, 1})), d2, {4}).type(), F32({4, 7}));
  f.Return({g});
  std::string text = m.ToText();
  EXPECT_TRUE(Contains(text, "dimension_numbers = #stablehlo.gather<offset_dims = [3, 4], "
                             "collapsed_slice_dims = [1], operand_batching_dims = [0], "
                             "start_indices_batching_dims = [1], start_index_map = [2, 1], "
                             "index_vector_dim = 3>, slice_sizes = array<i64: 1, 1, 2, 2>, "
                             "indices_are_sorted = true"));
  EXPECT_TRUE(Contains(text, "#stablehlo.gather<collapsed_slice_dims = [0], start_index_map = "
                             "[0], index_vector_dim = 2>"));
}

TEST(BuilderTest, GatherErrors) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({5, 3}));
  Value idx = f.Argument(S32({4, 1}));
  FunctionBuilder::GatherDimensions d;
  d.offset_dims = {1};
  d.collapsed_slice_dims = {0};
  d.start_index_map = {0};
  d.index_vector_dim = 1;
  auto error = [&](FunctionBuilder::GatherDimensions dims, std::vector<int64_t> sizes,
                   Value indices) { return ErrorOf([&] { f.Gather(x, indices, dims, sizes); }); };
  std::string e = error(d, {1, 4}, idx);
  EXPECT_TRUE(Contains(e, "stablehlo.gather: slice size 4 of dimension 1 is out of bounds"));
  EXPECT_TRUE(Contains(e, "operand tensor<5x3xf32>, start_indices tensor<4x1xi32>"));
  EXPECT_TRUE(Contains(error(d, {2, 3}, idx), "must have slice size 0 or 1"));
  EXPECT_TRUE(Contains(error(d, {1}, idx), "one entry per operand dimension"));
  EXPECT_TRUE(Contains(error(d, {1, 3}, f.Argument(F32({4, 1}))), "integer element type"));
  EXPECT_TRUE(Contains(error(d, {1, 3}, f.Argument(S32({4, 2}))), "needs 2 entries"));
  auto bad = d;
  bad.index_vector_dim = 3;
  EXPECT_TRUE(Contains(error(bad, {1, 3}, idx), "index_vector_dim 3 is out of range [0, 2]"));
  bad = d;
  bad.offset_dims = {2};
  EXPECT_TRUE(Contains(error(bad, {1, 3}, idx), "offset_dims [2] has dimension 2 out of range"));
  bad = d;
  bad.offset_dims = {};
  EXPECT_TRUE(Contains(error(bad, {1, 3}, idx), "must together have one entry"));
  bad = d;
  bad.start_index_map = {2};
  EXPECT_TRUE(Contains(error(bad, {1, 3}, idx), "start_index_map [2] has dimension 2"));
  bad = d;
  bad.collapsed_slice_dims = {0, 1};
  bad.offset_dims = {};
  EXPECT_EQ(f.Gather(x, idx, bad, {1, 1}).type(), F32({4}));
  // Unsorted offset dims.
  Value x3 = f.Argument(F32({5, 3, 2}));
  FunctionBuilder::GatherDimensions d3;
  d3.offset_dims = {2, 1};
  d3.collapsed_slice_dims = {0};
  d3.start_index_map = {0};
  d3.index_vector_dim = 1;
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Gather(x3, idx, d3, {1, 3, 2}); }),
                       "offset_dims [2, 1] must be sorted"));
  d3.offset_dims = {1, 1};
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Gather(x3, idx, d3, {1, 3, 2}); }), "repeats dimension 1"));
  // Batching dims: sizes must agree and index_vector_dim cannot be one.
  Value xb = f.Argument(F32({4, 5}));
  FunctionBuilder::GatherDimensions db;
  db.operand_batching_dims = {0};
  db.start_indices_batching_dims = {0};
  db.collapsed_slice_dims = {1};
  db.start_index_map = {1};
  db.index_vector_dim = 2;
  EXPECT_EQ(f.Gather(xb, f.Argument(S32({4, 6})), db, {1, 1}).type(), F32({4, 6}));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Gather(xb, f.Argument(S32({3, 6})), db, {1, 1}); }),
                       "batching dimension sizes differ"));
  db.index_vector_dim = 0;
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Gather(xb, f.Argument(S32({4})), db, {1, 1}); }),
                       "must not contain index_vector_dim"));
}

TEST(BuilderTest, Gather1D) {
  Module m;
  FunctionBuilder& f = m.main();
  Value buf = f.Argument(F32({12}));
  Value idx = f.Argument({ElementType::kS64, {2, 3}});
  Value g = f.Gather1D(buf, idx);
  EXPECT_EQ(g.type(), F32({2, 3}));
  EXPECT_EQ(f.Gather1D(buf, f.Argument(S32({}))).type(), F32({}));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Gather1D(f.Argument(F32({3, 4})), idx); }),
                       "Gather1D needs a rank-1 operand (operand tensor<3x4xf32>"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Gather1D(buf, f.Argument(F32({3}))); }),
                       "integer indices"));
  // An empty view of an empty buffer needs no gather; a non-empty one is an error.
  Value empty = f.Argument(F32({0}));
  EXPECT_EQ(f.Gather1D(empty, f.Argument(S32({0, 2}))).type(), F32({0, 2}));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Gather1D(empty, idx); }), "empty operand"));
  f.Return({g});
  EXPECT_TRUE(Contains(m.ToText(), "{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = "
                                    "[0], start_index_map = [0], index_vector_dim = 2>, "
                                    "slice_sizes = array<i64: 1>, indices_are_sorted = false} : "
                                    "(tensor<12xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>"));
}

TEST(BuilderTest, ScatterText) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({5, 3}));
  Value idx = f.Argument(S32({2, 1}));
  Value upd = f.Argument(F32({2, 3}));
  FunctionBuilder::ScatterDimensions d;
  d.update_window_dims = {1};
  d.inserted_window_dims = {0};
  d.scatter_dims_to_operand_dims = {0};
  d.index_vector_dim = 1;
  std::vector<Value> r = f.Scatter({x}, idx, {upd}, d, AddBody);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].type(), F32({5, 3}));
  f.Return(r);
  std::string text = m.ToText();
  EXPECT_TRUE(Contains(text, "%3 = \"stablehlo.scatter\"(%arg0, %arg1, %arg2) ({"));
  EXPECT_TRUE(Contains(text, "^bb0(%b0: tensor<f32>, %b1: tensor<f32>):"));
  EXPECT_TRUE(Contains(text, "\"stablehlo.add\"(%b0, %b1)"));
  EXPECT_TRUE(Contains(
      text, "}) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], "
            "inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = "
            "1>, indices_are_sorted = false, unique_indices = false} : (tensor<5x3xf32>, "
            "tensor<2x1xi32>, tensor<2x3xf32>) -> tensor<5x3xf32>"));
}

TEST(BuilderTest, ScatterVariadicAndReplace) {
  Module m;
  FunctionBuilder& f = m.main();
  Value a = f.Argument(F32({6}));
  Value b = f.Argument(S32({6}));
  Value idx = f.Argument(S32({2, 2}));
  Value ua = f.Argument(F32({2, 2}));
  Value ub = f.Argument(S32({2, 2}));
  FunctionBuilder::ScatterDimensions d;
  d.inserted_window_dims = {0};
  d.scatter_dims_to_operand_dims = {0};
  d.index_vector_dim = 2;
  std::vector<Value> r = f.Scatter({a, b}, idx, {ua, ub}, d, nullptr, true, true);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].type(), F32({6}));
  EXPECT_EQ(r[1].type(), S32({6}));
  bool called = false;
  f.Scatter({a, b}, idx, {ua, ub}, d, [&](FunctionBuilder&, std::span<const Value> args) {
    called = true;
    EXPECT_EQ(args.size(), 4u);
    EXPECT_EQ(args[1].type(), S32({}));
    EXPECT_EQ(args[2].type(), F32({}));
    return std::vector<Value>{args[0], args[3]};
  });
  EXPECT_TRUE(called);
  f.Return(r);
  std::string text = m.ToText();
  // The default body yields the updates.
  EXPECT_TRUE(Contains(text, "^bb0(%b0: tensor<f32>, %b1: tensor<i32>, %b2: tensor<f32>, %b3: "
                             "tensor<i32>):"));
  EXPECT_TRUE(Contains(text, "\"stablehlo.return\"(%b2, %b3)"));
  EXPECT_TRUE(Contains(text, "indices_are_sorted = true, unique_indices = true} : (tensor<6xf32>, "
                             "tensor<6xi32>, tensor<2x2xi32>, tensor<2x2xf32>, tensor<2x2xi32>) "
                             "-> (tensor<6xf32>, tensor<6xi32>)"));
}

TEST(BuilderTest, ScatterErrors) {
  Module m;
  FunctionBuilder& f = m.main();
  Value x = f.Argument(F32({5, 3}));
  Value idx = f.Argument(S32({2, 1}));
  Value upd = f.Argument(F32({2, 3}));
  FunctionBuilder::ScatterDimensions d;
  d.update_window_dims = {1};
  d.inserted_window_dims = {0};
  d.scatter_dims_to_operand_dims = {0};
  d.index_vector_dim = 1;
  auto error = [&](std::vector<Value> inputs, Value indices, std::vector<Value> updates,
                   FunctionBuilder::ScatterDimensions dims) {
    return ErrorOf([&] { f.Scatter(inputs, indices, updates, dims, nullptr); });
  };
  std::string e = error({x}, idx, {f.Argument(F32({3, 3}))}, d);
  EXPECT_TRUE(Contains(e, "stablehlo.scatter: update scatter dimension 0 must match"));
  EXPECT_TRUE(Contains(e, "inputs tensor<5x3xf32>; scatter_indices tensor<2x1xi32>; updates "
                          "tensor<3x3xf32>"));
  EXPECT_TRUE(Contains(error({x}, idx, {f.Argument(F32({2, 4}))}, d), "larger than the matching"));
  EXPECT_TRUE(Contains(error({x}, idx, {f.Argument(S32({2, 3}))}, d), "element type of its input"));
  EXPECT_TRUE(Contains(error({x}, idx, {f.Argument(F32({2, 3, 1}))}, d), "must have rank 2"));
  EXPECT_TRUE(Contains(error({x}, f.Argument(F32({2, 1})), {upd}, d), "integer element type"));
  EXPECT_TRUE(Contains(error({x}, idx, {}, d), "one update per input"));
  EXPECT_TRUE(Contains(error({}, idx, {}, d), "at least one input"));
  EXPECT_TRUE(Contains(error({x, f.Argument(F32({5, 4}))}, idx, {upd, upd}, d),
                       "input shapes differ"));
  auto bad = d;
  bad.scatter_dims_to_operand_dims = {0, 1};
  EXPECT_TRUE(Contains(error({x}, idx, {upd}, bad), "needs 1 entries"));
  bad = d;
  bad.inserted_window_dims = {};
  EXPECT_TRUE(Contains(error({x}, idx, {upd}, bad), "must together have one entry"));
  bad = d;
  bad.update_window_dims = {2};
  EXPECT_TRUE(Contains(error({x}, idx, {upd}, bad), "update_window_dims [2] has dimension 2"));
  // The body must return one scalar of each input type.
  EXPECT_TRUE(Contains(ErrorOf([&] {
                f.Scatter({x}, idx, {upd}, d, [](FunctionBuilder& b, std::span<const Value> a) {
                  return std::vector<Value>{b.Convert(a[0], ElementType::kS32)};
                });
              }),
              "must return (tensor<f32>)"));
}

TEST(BuilderTest, Scatter1D) {
  Module m;
  FunctionBuilder& f = m.main();
  Value buf = f.Argument(F32({12}));
  Value idx = f.Argument(S32({2, 3}));
  Value upd = f.Argument(F32({2, 3}));
  Value r = f.Scatter1D(buf, idx, upd);
  EXPECT_EQ(r.type(), F32({12}));
  EXPECT_EQ(f.Scatter1D(buf, f.Argument(S32({})), f.Argument(F32({}))).type(), F32({12}));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Scatter1D(buf, idx, f.Argument(F32({3, 2}))); }),
                       "updates with the operand's element type and the indices' dims"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Scatter1D(buf, idx, f.Argument(S32({2, 3}))); }),
                       "Scatter1D needs updates"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Scatter1D(f.Argument(F32({2, 6})), idx, upd); }),
                       "Scatter1D needs a rank-1 operand"));
  EXPECT_TRUE(Contains(ErrorOf([&] { f.Scatter1D(buf, upd, upd); }), "integer indices"));
  f.Return({r});
  EXPECT_TRUE(Contains(m.ToText(), "{scatter_dimension_numbers = #stablehlo.scatter<"
                                    "inserted_window_dims = [0], scatter_dims_to_operand_dims = "
                                    "[0], index_vector_dim = 2>, indices_are_sorted = false, "
                                    "unique_indices = false} : (tensor<12xf32>, tensor<2x3xi32>, "
                                    "tensor<2x3xf32>) -> tensor<12xf32>"));
}

TEST(BuilderTest, ValueIdsAreSequential) {
  Module m;
  FunctionBuilder& f = m.main();
  Value a = f.Argument(F32({2}));
  Value b = f.Negate(a);
  Value c = f.Abs(b);
  EXPECT_EQ(a.id(), 0);
  EXPECT_EQ(b.id(), 1);
  EXPECT_EQ(c.id(), 2);
  EXPECT_EQ(c.rank(), 1);
  EXPECT_EQ(c.element_type(), ElementType::kF32);
}

}  // namespace
}  // namespace torch_tpu::stablehlo

namespace torch_tpu::stablehlo {
namespace {

std::shared_ptr<LinkedFunction> Doubler() {
  auto linked = std::make_shared<LinkedFunction>();
  linked->entry = "k_double";
  linked->text =
      "  func.func private @k_double(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
      "    %0 = \"stablehlo.add\"(%a, %a) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>\n"
      "    \"func.return\"(%0) : (tensor<2xf32>) -> ()\n  }";
  linked->argument_types = {{ElementType::kF32, {2}}};
  linked->result_types = {{ElementType::kF32, {2}}};
  return linked;
}

TEST(LinkedFunctionTest, CallEmitsFuncCallAndLinksTheBodyOnce) {
  Module module;
  FunctionBuilder& b = module.main();
  Value x = b.Argument({ElementType::kF32, {2}});
  auto callee = Doubler();
  Value once = b.Call(callee, {x})[0];
  Value twice = b.Call(callee, {once})[0];
  b.Return({twice});
  const std::string text = module.ToText();
  EXPECT_TRUE(Contains(text, "\"func.call\"(%arg0) {callee = @k_double} : (tensor<2xf32>) -> "
                             "tensor<2xf32>"));
  const size_t first = text.find("func.func private @k_double");
  ASSERT_NE(first, std::string::npos);
  EXPECT_EQ(text.find("func.func private @k_double", first + 1), std::string::npos);
}

TEST(LinkedFunctionTest, CallChecksOperandTypesAndBodies) {
  Module module;
  FunctionBuilder& b = module.main();
  Value y = b.Argument({ElementType::kF32, {3}});
  EXPECT_EQ(ErrorOf([&] { b.Call(Doubler(), {y}); }),
            "func.call: @k_double takes (tensor<2xf32>), got (tensor<3xf32>)");
  Value x = b.Argument({ElementType::kF32, {2}});
  b.Call(Doubler(), {x});
  auto other = Doubler();
  other->text += "\n";
  EXPECT_EQ(ErrorOf([&] { b.Call(other, {x}); }), "func.call: @k_double linked with two bodies");
}

TEST(OptimizationBarrierTest, SeveralOperandsPassThroughOneOp) {
  Module m;
  FunctionBuilder& f = m.main();
  Value a = f.Argument(F32({2, 3}));
  Value b = f.Argument(S64({}));
  std::vector<Value> held = f.OptimizationBarrier(std::vector<Value>{a, b});
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[0].type(), F32({2, 3}));
  EXPECT_EQ(held[1].type(), S64({}));
  f.Return({f.Add(held[0], held[0]), held[1]});
  const std::string text = m.ToText();
  EXPECT_TRUE(Contains(text, "\"stablehlo.optimization_barrier\"(%arg0, %arg1) : "
                             "(tensor<2x3xf32>, tensor<i64>) -> (tensor<2x3xf32>, tensor<i64>)"));
  EXPECT_EQ(text.find("optimization_barrier"), text.rfind("optimization_barrier"));  // one op
}

}  // namespace
}  // namespace torch_tpu::stablehlo
