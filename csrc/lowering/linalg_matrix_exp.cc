// linalg_matrix_exp by scaling and squaring around the degree-18 Taylor polynomial of Bader,
// Blanes and Casas (Mathematics 2019, 7, 1174), evaluated with their five matrix products.
//
// The scaling is CPU's: s = max(0, ceil(log2(|A|_1 / theta_18))) per matrix, A / 2^s, then s
// squarings, so that both devices make the same approximation. CPU picks a Taylor polynomial of
// lower degree for matrices of small norm; for those, degree 18 agrees with them to the last bits,
// so one program serves every matrix of a batch.
//
// In float32, entries far smaller than the result's norm are rounding noise of the last squarings
// on either device (on CPU too they can be 1e-3 off the exact exponential, relatively); the same
// noise would need CPU's exact operation order, which XLA does not keep (it contracts multiplies
// and adds into fused multiply-adds and sums dot products in its own order).
#include <c10/util/Exception.h>

#include <array>
#include <cstdint>
#include <vector>

#include "lowering/context.h"
#include "lowering/dtype.h"
#include "lowering/linalg_common.h"

namespace torch_tpu::lowering {
namespace {

using namespace linalg;  // NOLINT: the shared linear-algebra vocabulary of this layer

// theta_18 of Bader, Blanes and Casas: the largest 1-norm for which the degree-18 polynomial is
// accurate to the unit roundoff of the type.
constexpr double kTheta18Float = 3.010066362817634e+00;
constexpr double kTheta18Double = 1.090863719290036e+00;

// Row i holds the coefficients of I, A, A^2, A^3, A^6 in the i-th combination B_i; then
// A_9 = B_0 B_4 + B_3 and T_18 = B_1 + (B_2 + A_9) A_9 (the paper's equation (16)).
constexpr std::array<std::array<double, 5>, 5> kT18Coefficients = {{
    {0., -1.00365581030144618291e-01, -8.02924648241156932449e-03,
     -8.92138498045729985177e-04, 0.},
    {0., 3.97849749499645077844e-01, 1.36783778460411720168e+00, 4.98289622525382669416e-01,
     -6.37898194594723280150e-04},
    {-1.09676396052962061844e+01, 1.68015813878906206114e+00, 5.71779846478865511061e-02,
     -6.98210122488052056106e-03, 3.34975017086070470649e-05},
    {-9.04316832390810593223e-02, -6.76404519071381882256e-02, 6.75961301770459654925e-02,
     2.95552570429315521194e-02, -1.39180257516060693404e-05},
    {0., 0., -9.23364619367118555360e-02, -1.69364939002081722752e-02,
     -1.40086798182036094347e-05},
}};

// T_18(a) for a [B, n, n].
Value TaylorDegree18(FunctionBuilder& b, Value a) {
  const ElementType type = a.element_type();
  Value a2 = BatchMatmul(b, a, a);
  Value a3 = BatchMatmul(b, a, a2);
  Value a6 = BatchMatmul(b, a3, a3);
  const std::array<Value, 5> powers = {Eye(b, type, a.dims()), a, a2, a3, a6};
  std::array<Value, 5> combinations;
  for (size_t i = 0; i < combinations.size(); ++i) {
    Value sum = b.Multiply(b.Constant(type, kT18Coefficients[i][0], a.dims()), powers[0]);
    for (size_t j = 1; j < powers.size(); ++j) {
      sum = b.Add(sum, b.Multiply(b.Constant(type, kT18Coefficients[i][j], a.dims()), powers[j]));
    }
    combinations[i] = sum;
  }
  Value a9 = b.Add(combinations[3], BatchMatmul(b, combinations[0], combinations[4]));
  return b.Add(combinations[1], BatchMatmul(b, b.Add(combinations[2], a9), a9));
}

// Exponent and mantissa layout of the IEEE type, for exact powers of two and exact log2 ceilings.
struct FloatLayout {
  ElementType bits;
  int64_t mantissa_bits, exponent_mask, bias;
};
FloatLayout LayoutOf(ElementType type) {
  if (type == ElementType::kF64) return {ElementType::kS64, 52, 0x7ff, 1023};
  return {ElementType::kS32, 23, 0xff, 127};
}

// ceil(log2(x)) for positive finite x, exactly (a computed log2 can land one ulp above an
// integer at a power of two and add a squaring CPU does not do); as x's integer type.
Value CeilLog2(FunctionBuilder& b, Value x, const FloatLayout& layout) {
  const auto& dims = x.dims();
  Value bits = b.BitcastConvert(x, layout.bits);
  Value exponent = b.Subtract(
      b.And(b.ShiftRightLogical(bits, b.ConstantInt(layout.bits, layout.mantissa_bits, dims)),
            b.ConstantInt(layout.bits, layout.exponent_mask, dims)),
      b.ConstantInt(layout.bits, layout.bias, dims));
  Value mantissa = b.And(bits, b.ConstantInt(layout.bits, (int64_t{1} << layout.mantissa_bits) - 1,
                                             dims));
  Value inexact = b.Compare(mantissa, b.ConstantInt(layout.bits, 0, dims), Direction::kNe);
  return b.Add(exponent, b.Convert(inexact, layout.bits));
}

// 2^s for integers 0 <= s <= bias, as the float type.
Value PowerOfTwo(FunctionBuilder& b, Value s, ElementType type, const FloatLayout& layout) {
  const auto& dims = s.dims();
  Value biased = b.Add(s, b.ConstantInt(layout.bits, layout.bias, dims));
  return b.BitcastConvert(
      b.ShiftLeft(biased, b.ConstantInt(layout.bits, layout.mantissa_bits, dims)), type);
}

// Squares matrix i of x [B, n, n] squarings[i] times ([B] integers).
Value RepeatedSquaring(FunctionBuilder& b, Value x, Value squarings) {
  const ElementType count_type = squarings.element_type();
  Value most = b.Reduce({squarings}, {b.ConstantInt(count_type, 0)}, {0},
                        [](FunctionBuilder& body, std::span<const Value> args) {
                          return std::vector<Value>{body.Maximum(args[0], args[1])};
                        })[0];
  std::vector<Value> final_values = b.While(
      {b.ConstantInt(count_type, 0), most, squarings, x},
      [](FunctionBuilder& body, std::span<const Value> args) {
        return std::vector<Value>{body.Compare(args[0], args[1], Direction::kLt)};
      },
      [](FunctionBuilder& body, std::span<const Value> args) {
        Value trip = args[0], matrices = args[3];
        const auto& dims = matrices.dims();
        Value again = body.BroadcastInDim(
            body.Compare(body.BroadcastInDim(trip, args[2].dims(), {}), args[2], Direction::kLt),
            dims, {0});
        Value squared = body.Select(again, BatchMatmul(body, matrices, matrices), matrices);
        return std::vector<Value>{body.Add(trip, body.ConstantInt(trip.element_type(), 1)),
                                  args[1], args[2], squared};
      });
  return final_values[3];
}

Value MatrixExponential(FunctionBuilder& b, Value a) {
  const ElementType type = a.element_type();
  const FloatLayout layout = LayoutOf(type);
  const auto& dims = a.dims();
  const int64_t batch = dims[0];
  // The 1-norm: the largest column sum of magnitudes.
  Value norm = b.Reduce({Sum(b, b.Abs(a), {1})}, {b.Constant(type, 0.0)}, {1},
                        [](FunctionBuilder& body, std::span<const Value> args) {
                          return std::vector<Value>{body.Maximum(args[0], args[1])};
                        })[0];
  const double theta = type == ElementType::kF64 ? kTheta18Double : kTheta18Float;
  Value ratio = b.Divide(norm, b.Constant(type, theta, {batch}));
  // A norm that is not finite gives a non-finite result with or without squarings; none are done.
  Value usable = b.And(b.IsFinite(ratio),
                       b.Compare(ratio, b.Constant(type, 1.0, {batch}), Direction::kGt));
  Value squarings = b.Select(usable, CeilLog2(b, ratio, layout),
                             b.ConstantInt(layout.bits, 0, {batch}));
  Value scale = b.BroadcastInDim(PowerOfTwo(b, squarings, type, layout), dims, {0});
  return RepeatedSquaring(b, TaylorDegree18(b, b.Divide(a, scale)), squarings);
}

// linalg_matrix_exp(Tensor self) -> Tensor
std::vector<Value> LinalgMatrixExp(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& input = operands[0];
  const auto& dims = input.value.dims();
  TORCH_CHECK(dims.size() >= 2,
              "linalg.matrix_exp: The input tensor A must have at least 2 dimensions.");
  TORCH_CHECK(dims[dims.size() - 1] == dims[dims.size() - 2],
              "linalg.matrix_exp: A must be batches of square matrices, but they are ",
              dims[dims.size() - 2], " by ", dims[dims.size() - 1], " matrices");
  TORCH_CHECK(c10::isFloatingType(input.dtype) || c10::isComplexType(input.dtype),
              "linalg.matrix_exp: Expected a floating point or complex tensor as input. Got ",
              c10::toString(input.dtype));
  auto& b = context.builder();
  // Half types compute in float32 and round once (CPU's half-type path reads its double
  // coefficients as half values and returns NaNs).
  Value a = context.Convert(input.value, ComputeDtype(input.dtype));
  const int64_t n = dims.back();
  Value result;
  if (n == 0 || IsEmpty(a)) {
    result = a;
  } else if (n == 1) {
    result = b.Exp(a);
  } else {
    result = UnflattenBatch(b, MatrixExponential(b, FlattenBatch(b, a)), BatchDims(a));
  }
  return {context.Convert(result, input.dtype)};
}
TORCH_TPU_LOWERING(LinalgMatrixExp, "aten::linalg_matrix_exp", "aten::linalg_matrix_exp.out");

}  // namespace
}  // namespace torch_tpu::lowering
