// The classical orthogonal polynomials of torch.special (Chebyshev T/U/V/W and their shifted
// versions, Hermite H/He, Laguerre L, Legendre P) of a float x and a per-element degree n.
//
// CPU evaluates each element with its three-term recurrence, n - 1 steps, after a few closed
// forms (endpoint values, and for Chebyshev inside (-1, 1) above a small degree, the
// trigonometric form). Here the recurrence runs on all elements at once in a stablehlo.while
// whose trip count is the largest degree that still needs it; an element stops updating after
// its own n - 1 steps. The same case order and the same arithmetic order as CPU's kernels keep
// float results within rounding of CPU's.
#include <c10/util/Exception.h>

#include <limits>

#include "lowering/context.h"
#include "lowering/opmath.h"

namespace torch_tpu::lowering {
namespace {

enum class Family { kChebyshevT, kChebyshevU, kChebyshevV, kChebyshevW, kHermiteH, kHermiteHe,
                    kLaguerre, kLegendre };

bool IsChebyshev(Family family) {
  return family == Family::kChebyshevT || family == Family::kChebyshevU ||
         family == Family::kChebyshevV || family == Family::kChebyshevW;
}

// P_1(y), the recurrence's second starting value (P_0 is 1).
Value FirstDegree(FunctionBuilder& b, Family family, Value y) {
  Value one = FullLike(b, 1.0, y);
  switch (family) {
    case Family::kChebyshevT: return y;
    case Family::kChebyshevU: return b.Add(y, y);
    case Family::kChebyshevV: return b.Subtract(b.Add(y, y), one);
    case Family::kChebyshevW: return b.Add(b.Add(y, y), one);
    case Family::kHermiteH: return b.Add(y, y);
    case Family::kHermiteHe: return y;
    case Family::kLaguerre: return b.Subtract(one, y);
    case Family::kLegendre: return y;
  }
  return y;
}

// P_{j+1} from p = P_{j-1}, q = P_j, with j (as a float tensor) counting from 1.
Value NextDegree(FunctionBuilder& b, Family family, Value j, Value y, Value p, Value q) {
  Value one = FullLike(b, 1.0, y);
  switch (family) {
    case Family::kHermiteH:  // CPU counts k = 2j
      return b.Subtract(b.Multiply(b.Add(y, y), q), b.Multiply(b.Add(j, j), p));
    case Family::kHermiteHe:
      return b.Subtract(b.Multiply(y, q), b.Multiply(j, p));
    case Family::kLaguerre:
      return b.Divide(b.Subtract(b.Multiply(b.Add(b.Add(j, j), b.Subtract(one, y)), q),
                                 b.Multiply(j, p)),
                      b.Add(j, one));
    case Family::kLegendre:
      return b.Divide(
          b.Subtract(b.Multiply(b.Multiply(b.Add(b.Add(j, j), one), y), q), b.Multiply(j, p)),
          b.Add(j, one));
    default:  // the Chebyshev families share 2y P_j - P_{j-1}
      return b.Subtract(b.Multiply(b.Add(y, y), q), p);
  }
}

// CPU's Chebyshev value at y = 1 (`upper`) or y = -1, where the trigonometric form divides by 0.
Value ChebyshevEndpoint(FunctionBuilder& b, Family family, bool upper, Value n, Value even) {
  Value one = FullLike(b, 1.0, n);
  Value alternating = b.Select(even, one, b.Negate(one));
  Value n1 = b.Add(n, one), n21 = b.Add(b.Add(n, n), one);
  switch (family) {
    case Family::kChebyshevT: return upper ? one : alternating;
    case Family::kChebyshevU: return upper ? n1 : b.Multiply(alternating, n1);
    case Family::kChebyshevV: return upper ? one : b.Multiply(alternating, n21);
    default: return upper ? n21 : alternating;  // W
  }
}

// Chebyshev functions of a = acos(y) for |y| < 1 above the degree where CPU switches to them.
Value ChebyshevTrigonometric(FunctionBuilder& b, Family family, bool shifted, Value y, Value n,
                             Value even) {
  Value a = b.Acos(y);
  Value one = FullLike(b, 1.0, y), half = FullLike(b, 0.5, y);
  switch (family) {
    case Family::kChebyshevT: return b.Cosine(b.Multiply(n, a));
    case Family::kChebyshevU: {
      Value n1 = b.Add(n, one);
      Value sin_a = b.Sine(a);
      return b.Select(b.Compare(sin_a, FullLike(b, 0.0, y), Direction::kNe),
                      b.Divide(b.Sine(b.Multiply(n1, a)), sin_a),
                      b.Divide(b.Multiply(n1, b.Cosine(b.Multiply(n1, a))), y));
    }
    case Family::kChebyshevV: {
      Value half_a = b.Divide(a, FullLike(b, 2.0, y));
      return b.Select(b.Compare(b.Sine(half_a), one, Direction::kNe),
                      b.Divide(b.Cosine(b.Multiply(b.Add(n, half), a)), b.Cosine(half_a)),
                      ChebyshevEndpoint(b, family, false, n, even));
    }
    default: {  // W; where cos(a / 2) rounds to 1, the unshifted kernel still looks at x's sign
      Value half_a = b.Divide(a, FullLike(b, 2.0, y));
      Value endpoint = ChebyshevEndpoint(b, family, false, n, even);
      if (!shifted) {
        endpoint = b.Select(b.Compare(y, FullLike(b, 0.0, y), Direction::kGt),
                            ChebyshevEndpoint(b, family, true, n, even), endpoint);
      }
      return b.Select(b.Compare(b.Cosine(half_a), one, Direction::kNe),
                      b.Divide(b.Sine(b.Multiply(b.Add(n, half), a)), b.Sine(half_a)), endpoint);
    }
  }
}

// Degree above which CPU's Chebyshev kernels use the trigonometric form inside (-1, 1).
int64_t TrigonometricFrom(Family family, bool shifted) {
  if (family == Family::kChebyshevT) return 6;
  if (!shifted) return 8;
  return family == Family::kChebyshevW ? 4 : 6;
}

const char* KernelName(Family family, bool shifted) {
  switch (family) {
    case Family::kChebyshevT:
      return shifted ? "shifted_chebyshev_polynomial_t_cpu" : "chebyshev_polynomial_t_cpu";
    case Family::kChebyshevU:
      return shifted ? "shifted_chebyshev_polynomial_u_cpu" : "chebyshev_polynomial_u_cpu";
    case Family::kChebyshevV:
      return shifted ? "shifted_chebyshev_polynomial_v_cpu" : "chebyshev_polynomial_v_cpu";
    case Family::kChebyshevW:
      return shifted ? "shifted_chebyshev_polynomial_w_cpu" : "chebyshev_polynomial_w_cpu";
    case Family::kHermiteH: return "hermite_polynomial_h_cpu";
    case Family::kHermiteHe: return "hermite_polynomial_he_cpu";
    case Family::kLaguerre: return "laguerre_polynomial_l_cpu";
    case Family::kLegendre: return "legendre_polynomial_p_cpu";
  }
  return "";
}

// Runs the recurrence `steps` (s64, per element) times from (1, P_1(y)); returns P_{steps + 1}
// where steps > 0.
Value Recurrence(FunctionBuilder& b, Family family, Value y, Value steps) {
  const ElementType s64 = ElementType::kS64;
  std::vector<int64_t> all_dims(steps.rank());
  for (int64_t d = 0; d < steps.rank(); ++d) all_dims[d] = d;
  Value limit = b.Reduce({steps}, {b.ConstantInt(s64, 0)}, all_dims,
                         [](FunctionBuilder& body, std::span<const Value> args) {
                           return std::vector<Value>{body.Maximum(args[0], args[1])};
                         })[0];
  std::vector<Value> initial = {b.ConstantInt(s64, 1), limit, steps, y, FullLike(b, 1.0, y),
                                FirstDegree(b, family, y)};
  auto results = b.While(
      initial,
      [](FunctionBuilder& body, std::span<const Value> args) {
        return std::vector<Value>{body.Compare(args[0], args[1], Direction::kLe)};
      },
      [family](FunctionBuilder& body, std::span<const Value> args) {
        const Value &j = args[0], &element_steps = args[2], &x = args[3], &p = args[4],
                    &q = args[5];
        Value j_float = body.BroadcastInDim(body.Convert(j, x.element_type()), x.dims(), {});
        Value next = NextDegree(body, family, j_float, x, p, q);
        Value active = body.Compare(body.BroadcastInDim(j, element_steps.dims(), {}),
                                    element_steps, Direction::kLe);
        return std::vector<Value>{body.Add(j, body.ConstantInt(ElementType::kS64, 1)), args[1],
                                  element_steps, x, body.Select(active, q, p),
                                  body.Select(active, next, q)};
      });
  return results[5];
}

// special_<family>_polynomial_<kind>(x, n): n is truncated to an integer as CPU does.
template <Family kFamily, bool kShifted>
std::vector<Value> OrthogonalPolynomial(LoweringContext& context,
                                        std::span<const Operand> operands) {
  const c10::ScalarType promoted = context.PromotedType(operands.subspan(0, 2));
  const c10::ScalarType dtype =
      c10::isFloatingType(promoted) ? promoted : c10::get_default_dtype_as_scalartype();
  CheckKernelDtype(context, dtype == c10::kFloat || dtype == c10::kDouble,
                   KernelName(kFamily, kShifted), dtype);
  auto values = context.PromoteAndBroadcast(operands.subspan(0, 2), dtype);
  auto& b = context.builder();
  Value x = values[0];
  // NaN and infinite degrees count as negative (CPU's Hermite H; the cast is undefined for the
  // others).
  Value degree = b.Convert(values[1], ElementType::kS64);
  degree = b.Select(b.IsFinite(values[1]), degree, b.ConstantInt(ElementType::kS64, -1, x.dims()));
  Value n = b.Convert(degree, x.element_type());  // int64 -> float, as in CPU's arithmetic
  auto degree_is = [&](int64_t value, Direction direction) {
    return b.Compare(degree, b.ConstantInt(ElementType::kS64, value, x.dims()), direction);
  };
  Value even = b.Compare(b.Remainder(degree, b.ConstantInt(ElementType::kS64, 2, x.dims())),
                         b.ConstantInt(ElementType::kS64, 0, x.dims()), Direction::kEq);
  Value one = FullLike(b, 1.0, x);
  Value y = kShifted ? b.Subtract(b.Add(x, x), one) : x;

  // (condition, value) in CPU's order of precedence: the first true condition decides.
  std::vector<std::pair<Value, Value>> cases;
  cases.push_back({degree_is(0, Direction::kLt), FullLike(b, 0.0, x)});
  if (IsChebyshev(kFamily) || kFamily == Family::kLegendre) {
    const Family endpoint_family = IsChebyshev(kFamily) ? kFamily : Family::kChebyshevT;
    Value upper = b.Compare(x, one, Direction::kEq);
    Value lower = b.Compare(x, FullLike(b, kShifted ? 0.0 : -1.0, x), Direction::kEq);
    cases.push_back({upper, ChebyshevEndpoint(b, endpoint_family, true, n, even)});
    cases.push_back({lower, ChebyshevEndpoint(b, endpoint_family, false, n, even)});
  }
  if (IsChebyshev(kFamily)) {
    Value inside = b.Compare(b.Abs(y), one, Direction::kLt);
    cases.push_back({b.And(degree_is(TrigonometricFrom(kFamily, kShifted), Direction::kGt), inside),
                     ChebyshevTrigonometric(b, kFamily, kShifted, y, n, even)});
  }
  if (kFamily == Family::kLaguerre) {
    cases.push_back({b.Compare(x, FullLike(b, 0.0, x), Direction::kEq), one});
  }
  cases.push_back({degree_is(0, Direction::kEq), one});
  cases.push_back({degree_is(1, Direction::kEq), FirstDegree(b, kFamily, y)});
  if (kFamily == Family::kHermiteH || kFamily == Family::kHermiteHe) {
    const int64_t limit = dtype == c10::kFloat ? 128 : 512;
    cases.push_back({degree_is(limit, Direction::kGt),
                     FullLike(b, std::numeric_limits<double>::quiet_NaN(), x)});
  }
  Value decided = b.Constant(ElementType::kPred, 0.0, x.dims());
  for (const auto& [condition, value] : cases) decided = b.Or(decided, condition);
  // Elements no case decided take n - 1 recurrence steps; the others take none.
  Value steps = b.Select(decided, b.ConstantInt(ElementType::kS64, 0, x.dims()),
                         b.Subtract(degree, b.ConstantInt(ElementType::kS64, 1, x.dims())));
  Value result = Recurrence(b, kFamily, y, steps);
  for (auto it = cases.rbegin(); it != cases.rend(); ++it) {
    result = b.Select(it->first, it->second, result);
  }
  return {result};
}

#define TORCH_TPU_POLYNOMIAL(family, shifted, name) \
  TORCH_TPU_LOWERING((OrthogonalPolynomial<family, shifted>), "aten::special_" name, \
                     "aten::special_" name ".out")
TORCH_TPU_POLYNOMIAL(Family::kChebyshevT, false, "chebyshev_polynomial_t");
TORCH_TPU_POLYNOMIAL(Family::kChebyshevU, false, "chebyshev_polynomial_u");
TORCH_TPU_POLYNOMIAL(Family::kChebyshevV, false, "chebyshev_polynomial_v");
TORCH_TPU_POLYNOMIAL(Family::kChebyshevW, false, "chebyshev_polynomial_w");
TORCH_TPU_POLYNOMIAL(Family::kChebyshevT, true, "shifted_chebyshev_polynomial_t");
TORCH_TPU_POLYNOMIAL(Family::kChebyshevU, true, "shifted_chebyshev_polynomial_u");
TORCH_TPU_POLYNOMIAL(Family::kChebyshevV, true, "shifted_chebyshev_polynomial_v");
TORCH_TPU_POLYNOMIAL(Family::kChebyshevW, true, "shifted_chebyshev_polynomial_w");
TORCH_TPU_POLYNOMIAL(Family::kHermiteH, false, "hermite_polynomial_h");
TORCH_TPU_POLYNOMIAL(Family::kHermiteHe, false, "hermite_polynomial_he");
TORCH_TPU_POLYNOMIAL(Family::kLaguerre, false, "laguerre_polynomial_l");
TORCH_TPU_POLYNOMIAL(Family::kLegendre, false, "legendre_polynomial_p");
#undef TORCH_TPU_POLYNOMIAL

}  // namespace
}  // namespace torch_tpu::lowering
