// The three FFT primitives every torch.fft function decomposes into (_fft_r2c, _fft_c2r,
// _fft_c2c), lowered to stablehlo.fft.
//
// stablehlo.fft transforms the 1 to 3 innermost dims, so the dims to transform are moved to the
// end (in the order given: the last one is the halved dim of a real transform) and transformed
// in chunks of at most three, innermost chunk first for forward transforms and last for inverse
// ones. StableHLO's inverse transforms divide by the signal size; ATen's primitives are
// unnormalized and then scaled by `normalization` (none, 1/sqrt(n), 1/n), which is applied once at
// the end.
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "lowering/context.h"

namespace torch_tpu::lowering {
namespace {

using FftType = FunctionBuilder::FftType;

constexpr int64_t kMaxFftRank = 3;

enum class Normalization : int64_t { kNone = 0, kByRootN = 1, kByN = 2 };

// The transformed dims wrapped and checked for repeats.
std::vector<int64_t> FftDims(LoweringContext& context, const Operand& dims, int64_t rank) {
  std::vector<int64_t> result;
  for (int64_t dim : context.IntList(dims)) result.push_back(context.WrapDim(dim, rank));
  std::vector<int64_t> sorted = result;
  std::sort(sorted.begin(), sorted.end());
  TORCH_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), context.op_name(),
              ": FFT dims must be unique");
  return result;
}

// The permutation that moves `dims` (in their order) behind all other dims.
std::vector<int64_t> DimsLastPermutation(const std::vector<int64_t>& dims, int64_t rank) {
  std::vector<int64_t> permutation;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) permutation.push_back(d);
  }
  permutation.insert(permutation.end(), dims.begin(), dims.end());
  return permutation;
}

std::vector<int64_t> Inverse(const std::vector<int64_t>& permutation) {
  std::vector<int64_t> inverse(permutation.size());
  for (size_t i = 0; i < permutation.size(); ++i) inverse[permutation[i]] = static_cast<int64_t>(i);
  return inverse;
}

Value Transpose(FunctionBuilder& b, Value value, const std::vector<int64_t>& permutation) {
  std::vector<int64_t> identity(permutation.size());
  std::iota(identity.begin(), identity.end(), 0);
  return permutation == identity ? value : b.Transpose(value, permutation);
}

// Transforms the `count` trailing dims ending `end` dims from the back (0: the innermost) of a
// value whose transformed dims are all trailing.
Value TransformChunk(FunctionBuilder& b, Value value, FftType type, int64_t end_from_back,
                     int64_t count, std::vector<int64_t> lengths) {
  const int64_t rank = value.rank();
  if (end_from_back == 0) return b.Fft(value, type, std::move(lengths));
  // Rotate the chunk to the innermost position and back.
  std::vector<int64_t> permutation;
  const int64_t chunk_begin = rank - end_from_back - count;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < chunk_begin || d >= chunk_begin + count) permutation.push_back(d);
  }
  for (int64_t d = chunk_begin; d < chunk_begin + count; ++d) permutation.push_back(d);
  Value moved = b.Fft(Transpose(b, value, permutation), type, std::move(lengths));
  return Transpose(b, moved, Inverse(permutation));
}

// A complex-to-complex transform of the trailing `fft_rank` dims, chunk by chunk, skipping the
// innermost `done` dims (already transformed).
Value ComplexTransform(FunctionBuilder& b, Value value, int64_t fft_rank, bool forward,
                       int64_t done = 0) {
  while (done < fft_rank) {
    const int64_t count = std::min(kMaxFftRank, fft_rank - done);
    const std::vector<int64_t> lengths(value.dims().end() - done - count,
                                       value.dims().end() - done);
    value = TransformChunk(b, value, forward ? FftType::kFft : FftType::kIfft, done, count, lengths);
    done += count;
  }
  return value;
}

// Scales the transform of a signal of `signal_size` elements the way ATen's primitives do:
// `unnormalized_factor` undoes StableHLO's 1/n of inverse transforms (1 for forward ones).
Value Normalize(LoweringContext& context, Value value, const Operand& normalization,
                double signal_size, bool inverse) {
  const auto mode = static_cast<Normalization>(context.Int(normalization));
  double scale = inverse ? signal_size : 1.0;
  if (mode == Normalization::kByRootN) scale /= std::sqrt(signal_size);
  if (mode == Normalization::kByN) scale /= signal_size;
  if (scale == 1.0) return value;
  auto& b = context.builder();
  return b.Multiply(value, b.Constant(value.element_type(), scale, value.dims()));
}

double SignalSize(const Value& value, int64_t fft_rank) {
  double size = 1;
  for (int64_t i = value.rank() - fft_rank; i < value.rank(); ++i) size *= value.dims()[i];
  return size;
}

void CheckFloatInput(LoweringContext& context, c10::ScalarType dtype, bool complex) {
  const bool ok = complex ? (dtype == c10::kComplexFloat || dtype == c10::kComplexDouble)
                          : (dtype == c10::kFloat || dtype == c10::kDouble);
  TORCH_CHECK_TYPE(ok, context.op_name(), ": expected a ",
                   complex ? "complex64 or complex128" : "float32 or float64",
                   " input on the tpu device, got ", dtype);
}

// The input with its transformed dims moved last (a no-op view when they already are).
struct MovedSignal {
  std::vector<int64_t> permutation;
  int64_t fft_rank;
  Value value;
};

MovedSignal MoveTransformedDimsLast(LoweringContext& context, std::span<const Operand> operands,
                                    bool complex_input) {
  CheckFloatInput(context, operands[0].dtype, complex_input);
  const Value& input = operands[0].value;
  const std::vector<int64_t> dims = FftDims(context, operands[1], input.rank());
  const std::vector<int64_t> permutation = DimsLastPermutation(dims, input.rank());
  return {permutation, static_cast<int64_t>(dims.size()),
          Transpose(context.builder(), input, permutation)};
}

// _fft_c2c(self, dim, normalization, forward)
std::vector<Value> FftC2C(LoweringContext& context, std::span<const Operand> operands) {
  const MovedSignal signal = MoveTransformedDimsLast(context, operands, /*complex_input=*/true);
  const bool forward = context.Bool(operands[3]);
  if (signal.fft_rank == 0 || signal.value.type().NumElements() == 0) return {operands[0].value};
  auto& b = context.builder();
  Value transformed = ComplexTransform(b, signal.value, signal.fft_rank, forward);
  transformed = Normalize(context, transformed, operands[2],
                          SignalSize(signal.value, signal.fft_rank), !forward);
  return {Transpose(b, transformed, Inverse(signal.permutation))};
}
TORCH_TPU_LOWERING(FftC2C, "aten::_fft_c2c", "aten::_fft_c2c.out");

// _fft_r2c(self, dim, normalization, onesided)
std::vector<Value> FftR2C(LoweringContext& context, std::span<const Operand> operands) {
  const MovedSignal signal = MoveTransformedDimsLast(context, operands, /*complex_input=*/false);
  const bool onesided = context.Bool(operands[3]);
  TORCH_CHECK(signal.fft_rank > 0, context.op_name(), ": expected at least one dim to transform");
  auto& b = context.builder();
  const Value& moved = signal.value;
  const int64_t fft_rank = signal.fft_rank;
  const ElementType complex_type = stablehlo::ComplexTypeOf(moved.element_type());
  Value transformed;
  if (moved.type().NumElements() == 0) {
    std::vector<int64_t> dims_out = moved.dims();
    if (onesided) dims_out.back() = dims_out.back() / 2 + 1;
    transformed = b.Constant(complex_type, 0.0, dims_out);
  } else if (!onesided) {
    // The full spectrum of a real signal is the complex transform of it.
    transformed = ComplexTransform(b, b.Convert(moved, complex_type), fft_rank, true);
  } else {
    // The real transform halves the innermost dim; the other chunks are complex transforms.
    const int64_t count = std::min(kMaxFftRank, fft_rank);
    const std::vector<int64_t> lengths(moved.dims().end() - count, moved.dims().end());
    transformed = ComplexTransform(b, b.Fft(moved, FftType::kRfft, lengths), fft_rank,
                                   /*forward=*/true, /*done=*/count);
  }
  transformed =
      Normalize(context, transformed, operands[2], SignalSize(moved, fft_rank), false);
  return {Transpose(b, transformed, Inverse(signal.permutation))};
}
TORCH_TPU_LOWERING(FftR2C, "aten::_fft_r2c", "aten::_fft_r2c.out");

// _fft_c2r(self, dim, normalization, last_dim_size): the input holds the non-redundant half
// (last_dim_size / 2 + 1 entries) of the last dim's spectrum.
std::vector<Value> FftC2R(LoweringContext& context, std::span<const Operand> operands) {
  const MovedSignal signal = MoveTransformedDimsLast(context, operands, /*complex_input=*/true);
  const int64_t last_dim_size = context.Int(operands[3]);
  TORCH_CHECK(signal.fft_rank > 0, context.op_name(), ": expected at least one dim to transform");
  TORCH_CHECK(last_dim_size >= 1, context.op_name(), ": Invalid number of data points (",
              last_dim_size, ") specified");
  auto& b = context.builder();
  const int64_t fft_rank = signal.fft_rank;
  Value moved = signal.value;
  // Entries past the half spectrum are redundant; missing ones are zero.
  const int64_t half = last_dim_size / 2 + 1;
  const int64_t given = moved.dims().back();
  if (given > half) {
    std::vector<int64_t> start(moved.rank(), 0), limit = moved.dims(), step(moved.rank(), 1);
    limit.back() = half;
    moved = b.Slice(moved, start, limit, step);
  } else if (given < half) {
    std::vector<int64_t> low(moved.rank(), 0), high(moved.rank(), 0), interior(moved.rank(), 0);
    high.back() = half - given;
    moved = b.Pad(moved, b.Constant(moved.element_type(), 0.0), low, high, interior);
  }
  std::vector<int64_t> output_dims = moved.dims();
  output_dims.back() = last_dim_size;
  const ElementType real_type = stablehlo::ComplexPartType(moved.element_type());
  double signal_size = 1;
  for (int64_t i = moved.rank() - fft_rank; i < moved.rank(); ++i) signal_size *= output_dims[i];
  Value transformed;
  if (stablehlo::TensorType{real_type, output_dims}.NumElements() == 0) {
    transformed = b.Constant(real_type, 0.0, output_dims);
  } else {
    // Inverse order of _fft_r2c: the outer chunks first, the real transform of the innermost
    // chunk last.
    const int64_t count = std::min(kMaxFftRank, fft_rank);
    Value outer = moved;
    for (int64_t done = fft_rank; done > count;) {
      const int64_t chunk = std::min(kMaxFftRank, done - count);
      const int64_t end_from_back = done - chunk;
      const std::vector<int64_t> lengths(outer.dims().end() - end_from_back - chunk,
                                         outer.dims().end() - end_from_back);
      outer = TransformChunk(b, outer, FftType::kIfft, end_from_back, chunk, lengths);
      done -= chunk;
    }
    const std::vector<int64_t> lengths(output_dims.end() - count, output_dims.end());
    transformed = b.Fft(outer, FftType::kIrfft, lengths);
  }
  transformed = Normalize(context, transformed, operands[2], signal_size, true);
  return {Transpose(b, transformed, Inverse(signal.permutation))};
}
TORCH_TPU_LOWERING(FftC2R, "aten::_fft_c2r", "aten::_fft_c2r.out");

}  // namespace
}  // namespace torch_tpu::lowering
