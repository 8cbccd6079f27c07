// Text-level tests of the builder's complex element types and complex/FFT ops.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stablehlo/builder.h"
#include "stablehlo/element_type.h"
#include "stablehlo/module.h"
#include "stablehlo/tensor_type.h"
#include "stablehlo_test_support.h"

namespace torch_tpu::stablehlo {
namespace {

using Fft = FunctionBuilder::FftType;

TensorType Of(ElementType type, std::vector<int64_t> dims) { return {type, std::move(dims)}; }

std::string TextOf(Module& module) { return module.ToText(); }

TEST(ComplexTypeTest, NamesWidthsAndParts) {
  EXPECT_EQ(MlirName(ElementType::kC64), "complex<f32>");
  EXPECT_EQ(MlirName(ElementType::kC128), "complex<f64>");
  EXPECT_EQ(ByteWidth(ElementType::kC64), 8);
  EXPECT_EQ(ByteWidth(ElementType::kC128), 16);
  EXPECT_TRUE(IsComplex(ElementType::kC64));
  EXPECT_FALSE(IsFloat(ElementType::kC64));
  EXPECT_FALSE(IsComplex(ElementType::kF32));
  EXPECT_EQ(ComplexPartType(ElementType::kC128), ElementType::kF64);
  EXPECT_EQ(ComplexTypeOf(ElementType::kF32), ElementType::kC64);
  EXPECT_EQ(Of(ElementType::kC64, {2, 3}).ToString(), "tensor<2x3xcomplex<f32>>");
  EXPECT_EQ(ErrorOf([] { ComplexTypeOf(ElementType::kBF16); }),
            "ComplexTypeOf: complex<bf16> is not supported (parts must be f32 or f64)");
}

TEST(ComplexOpsTest, PartsConstantsAndArithmetic) {
  Module m;
  FunctionBuilder& f = m.main();
  Value z = f.Argument(Of(ElementType::kC64, {4}));
  Value re = f.Real(z);
  Value im = f.Imag(z);
  EXPECT_EQ(re.type(), Of(ElementType::kF32, {4}));
  Value rebuilt = f.Complex(re, f.Negate(im));
  EXPECT_EQ(rebuilt.element_type(), ElementType::kC64);
  Value two = f.Constant(ElementType::kC64, 2.0, {4});
  Value product = f.Multiply(f.Exp(rebuilt), two);
  Value modulus = f.Abs(product);
  EXPECT_EQ(modulus.type(), Of(ElementType::kF32, {4}));
  Value equal = f.Compare(z, product, FunctionBuilder::ComparisonDirection::kNe);
  f.Return({product, modulus, equal});
  const std::string text = TextOf(m);
  EXPECT_NE(text.find("dense<(2.0, 0.0)> : tensor<4xcomplex<f32>>"), std::string::npos) << text;
  EXPECT_NE(text.find("\"stablehlo.abs\"(%"), std::string::npos);
  EXPECT_NE(text.find("-> tensor<4xf32>"), std::string::npos);
  EXPECT_NE(text.find("compare_type = #stablehlo<comparison_type FLOAT>"), std::string::npos);
}

TEST(ComplexOpsTest, RejectsOrderingsAndMismatchedParts) {
  Module m;
  FunctionBuilder& f = m.main();
  Value z = f.Argument(Of(ElementType::kC64, {2}));
  Value x = f.Argument(Of(ElementType::kF32, {2}));
  Value y = f.Argument(Of(ElementType::kF64, {2}));
  EXPECT_EQ(ErrorOf([&] { f.Compare(z, z, FunctionBuilder::ComparisonDirection::kLt); }),
            "stablehlo.compare: complex operands tensor<2xcomplex<f32>> only compare for EQ or NE");
  EXPECT_EQ(ErrorOf([&] { f.Complex(x, y); }),
            "stablehlo.complex: real and imaginary parts tensor<2xf32> and tensor<2xf64> differ");
  EXPECT_EQ(ErrorOf([&] { f.Maximum(z, z); }),
            "stablehlo.maximum: operand type tensor<2xcomplex<f32>> has an unsupported element "
            "type; expected pred, integer or floating-point");
  EXPECT_EQ(ErrorOf([&] { f.Real(x); }),
            "stablehlo.real: operand type tensor<2xf32> has an unsupported element type; "
            "expected complex");
}

TEST(FftOpTest, InfersResultTypesOfEveryKind) {
  Module m;
  FunctionBuilder& f = m.main();
  Value signal = f.Argument(Of(ElementType::kF32, {3, 4, 8}));
  Value half = f.Fft(signal, Fft::kRfft, {4, 8});
  EXPECT_EQ(half.type(), Of(ElementType::kC64, {3, 4, 5}));
  Value back = f.Fft(half, Fft::kIrfft, {4, 8});
  EXPECT_EQ(back.type(), Of(ElementType::kF32, {3, 4, 8}));
  Value full = f.Fft(f.Convert(signal, ElementType::kC64), Fft::kFft, {3, 4, 8});
  EXPECT_EQ(full.type(), Of(ElementType::kC64, {3, 4, 8}));
  Value inverse = f.Fft(full, Fft::kIfft, {8});
  f.Return({back, inverse});
  const std::string text = TextOf(m);
  EXPECT_NE(text.find("{fft_type = #stablehlo<fft_type RFFT>, fft_length = array<i64: 4, 8>} : "
                      "(tensor<3x4x8xf32>) -> tensor<3x4x5xcomplex<f32>>"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("fft_type = #stablehlo<fft_type IRFFT>"), std::string::npos);
}

TEST(FftOpTest, RejectsBadLengthsAndTypes) {
  Module m;
  FunctionBuilder& f = m.main();
  Value signal = f.Argument(Of(ElementType::kF32, {2, 2, 2, 8}));
  Value spectrum = f.Argument(Of(ElementType::kC64, {8}));
  EXPECT_EQ(ErrorOf([&] { f.Fft(signal, Fft::kRfft, {2, 2, 2, 8}); }),
            "stablehlo.fft: fft_length array<i64: 2, 2, 2, 8> must name 1 to 3 of the trailing "
            "dims of tensor<2x2x2x8xf32>");
  EXPECT_EQ(ErrorOf([&] { f.Fft(signal, Fft::kFft, {8}); }),
            "stablehlo.fft: operand type tensor<2x2x2x8xf32> has an unsupported element type; "
            "expected complex");
  EXPECT_EQ(ErrorOf([&] { f.Fft(spectrum, Fft::kIrfft, {8}); }),
            "stablehlo.fft: operand tensor<8xcomplex<f32>> does not match fft_length "
            "array<i64: 8> for IRFFT");
  EXPECT_EQ(ErrorOf([&] { f.Fft(spectrum, Fft::kRfft, {8}); }),
            "stablehlo.fft: RFFT needs an f32 or f64 operand, got tensor<8xcomplex<f32>>");
}

}  // namespace
}  // namespace torch_tpu::stablehlo
