// Complex-number ops of FunctionBuilder: splitting into and building from parts, and the FFT.
#include <string>

#include "builder.h"
#include "builder_internal.h"

namespace torch_tpu::stablehlo {

using internal::CheckElementType;
using internal::Fail;

namespace {

std::string_view FftTypeName(FunctionBuilder::FftType type) {
  switch (type) {
    case FunctionBuilder::FftType::kFft: return "FFT";
    case FunctionBuilder::FftType::kIfft: return "IFFT";
    case FunctionBuilder::FftType::kRfft: return "RFFT";
    case FunctionBuilder::FftType::kIrfft: return "IRFFT";
  }
  throw BuilderError("stablehlo.fft: invalid fft type");
}

}  // namespace

Value FunctionBuilder::Real(Value operand) {
  constexpr std::string_view kOp = "stablehlo.real";
  const TensorType& type = Check(operand, kOp).type;
  CheckElementType(kOp, type, internal::kComplexOk);
  return EmitOne(kOp, {operand}, "", TensorType{ComplexPartType(type.element_type), type.dims});
}

Value FunctionBuilder::Imag(Value operand) {
  constexpr std::string_view kOp = "stablehlo.imag";
  const TensorType& type = Check(operand, kOp).type;
  CheckElementType(kOp, type, internal::kComplexOk);
  return EmitOne(kOp, {operand}, "", TensorType{ComplexPartType(type.element_type), type.dims});
}

Value FunctionBuilder::Complex(Value real, Value imag) {
  constexpr std::string_view kOp = "stablehlo.complex";
  const TensorType& re = Check(real, kOp).type;
  const TensorType& im = Check(imag, kOp).type;
  if (re != im) {
    Fail(kOp, "real and imaginary parts " + re.ToString() + " and " + im.ToString() + " differ");
  }
  if (re.element_type != ElementType::kF32 && re.element_type != ElementType::kF64) {
    Fail(kOp, "parts must be f32 or f64, got " + re.ToString());
  }
  return EmitOne(kOp, {real, imag}, "", TensorType{ComplexTypeOf(re.element_type), re.dims});
}

Value FunctionBuilder::Fft(Value operand, FftType fft_type, std::vector<int64_t> fft_length) {
  constexpr std::string_view kOp = "stablehlo.fft";
  const TensorType& type = Check(operand, kOp).type;
  const int64_t count = static_cast<int64_t>(fft_length.size());
  if (count < 1 || count > 3 || count > type.rank()) {
    Fail(kOp, "fft_length " + internal::I64Array(fft_length) + " must name 1 to 3 of the " +
                  "trailing dims of " + type.ToString());
  }
  const bool real_input = fft_type == FftType::kRfft;
  const bool real_output = fft_type == FftType::kIrfft;
  if (real_input) {
    if (type.element_type != ElementType::kF32 && type.element_type != ElementType::kF64) {
      Fail(kOp, "RFFT needs an f32 or f64 operand, got " + type.ToString());
    }
  } else {
    CheckElementType(kOp, type, internal::kComplexOk);
  }
  std::vector<int64_t> result_dims = type.dims;
  const int64_t first = type.rank() - count;
  for (int64_t i = 0; i < count; ++i) {
    // The last transformed dim holds only the non-redundant half of a real signal's spectrum.
    const bool halved_in = fft_type == FftType::kIrfft && i == count - 1;
    const int64_t expected = halved_in ? fft_length[i] / 2 + 1 : fft_length[i];
    if (fft_length[i] < 0 || type.dims[first + i] != expected) {
      Fail(kOp, "operand " + type.ToString() + " does not match fft_length " +
                    internal::I64Array(fft_length) + " for " + std::string(FftTypeName(fft_type)));
    }
    result_dims[first + i] = fft_length[i];
  }
  if (real_input) result_dims.back() = fft_length.back() / 2 + 1;
  const ElementType result_type = real_input     ? ComplexTypeOf(type.element_type)
                                  : real_output ? ComplexPartType(type.element_type)
                                                : type.element_type;
  const std::string attributes = "fft_type = #stablehlo<fft_type " +
                                 std::string(FftTypeName(fft_type)) +
                                 ">, fft_length = " + internal::I64Array(fft_length);
  return EmitOne(kOp, {operand}, attributes, TensorType{result_type, std::move(result_dims)});
}

}  // namespace torch_tpu::stablehlo
