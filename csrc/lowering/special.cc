// Special functions: digamma, Hurwitz zeta and polygamma, modified Bessel functions of order 0
// and 1 (both kinds), the spherical Bessel function j0, and the normal distribution's tails
// (ndtri, erfcx, log_ndtr).
//
// Each is a fixed-length evaluation (Chebyshev series, a truncated Euler-Maclaurin sum, a
// continued fraction evaluated from a fixed depth) so that the program has no data-dependent
// loops; the lengths are chosen so the truncation error is below float32 rounding. Coefficient
// tables are the published Cephes approximations that CPU's kernels also evaluate.
#include <c10/util/Exception.h>

#include <array>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <span>

#include "lowering/context.h"
#include "lowering/opmath.h"

namespace torch_tpu::lowering {
namespace {

// Chebyshev coefficients of exp(-x) I0(x) on [0, 8] and of exp(-x) sqrt(x) I0(x) on [8, inf).
constexpr double kI0eSmall[] = {
    -4.41534164647933937950E-18, 3.33079451882223809783E-17,  -2.43127984654795469359E-16,
    1.71539128555513303061E-15,  -1.16853328779934516808E-14, 7.67618549860493561688E-14,
    -4.85644678311192946090E-13, 2.95505266312963983461E-12,  -1.72682629144155570723E-11,
    9.67580903537323691224E-11,  -5.18979560163526290666E-10, 2.65982372468238665035E-9,
    -1.30002500998624804212E-8,  6.04699502254191894932E-8,   -2.67079385394061173391E-7,
    1.11738753912010371815E-6,   -4.41673835845875056359E-6,  1.64484480707288970893E-5,
    -5.75419501008210370398E-5,  1.88502885095841655729E-4,   -5.76375574538582365885E-4,
    1.63947561694133579842E-3,   -4.32430999505057594430E-3,  1.05464603945949983183E-2,
    -2.37374148058994688156E-2,  4.93052842396707084878E-2,   -9.49010970480476444210E-2,
    1.71620901522208775349E-1,   -3.04682672343198398683E-1,  6.76795274409476084995E-1};
constexpr double kI0eLarge[] = {
    -7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,
    3.46122286769746109310E-17,  -2.82762398051658348494E-16, -3.42548561967721913462E-16,
    1.77256013305652638360E-15,  3.81168066935262242075E-15,  -9.55484669882830764870E-15,
    -4.15056934728722208663E-14, 1.54008621752140982691E-14,  3.85277838274214270114E-13,
    7.18012445138366623367E-13,  -1.79417853150680611778E-12, -1.32158118404477131188E-11,
    -3.14991652796324136454E-11, 1.18891471078464383424E-11,  4.94060238822496958910E-10,
    3.39623202570838634515E-9,   2.26666899049817806459E-8,   2.04891858946906374183E-7,
    2.89137052083475648297E-6,   6.88975834691682398426E-5,   3.36911647825569408990E-3,
    8.04490411014108831608E-1};
// The same for exp(-x) I1(x) / x on [0, 8] and exp(-x) sqrt(x) I1(x) on [8, inf).
constexpr double kI1eSmall[] = {
    2.77791411276104639959E-18,  -2.11142121435816608115E-17, 1.55363195773620046921E-16,
    -1.10559694773538630805E-15, 7.60068429473540693410E-15,  -5.04218550472791168711E-14,
    3.22379336594557470981E-13,  -1.98397439776494371520E-12, 1.17361862988909016308E-11,
    -6.66348972350202774223E-11, 3.62559028155211703701E-10,  -1.88724975172282928790E-9,
    9.38153738649577178388E-9,   -4.44505912879632808065E-8,  2.00329475355213526229E-7,
    -8.56872026469545474066E-7,  3.47025130813767847674E-6,   -1.32731636560394358279E-5,
    4.78156510755005422638E-5,   -1.61760815825896745588E-4,  5.12285956168575772895E-4,
    -1.51357245063125314899E-3,  4.15642294431288815669E-3,   -1.05640848946261981558E-2,
    2.47264490306265168283E-2,   -5.29459812080949914269E-2,  1.02643658689847095384E-1,
    -1.76416518357834055153E-1,  2.52587186443633654823E-1};
constexpr double kI1eLarge[] = {
    7.51729631084210481353E-18,  4.41434832307170791151E-18,  -4.65030536848935832153E-17,
    -3.20952592199342395980E-17, 2.96262899764595013876E-16,  3.30820231092092828324E-16,
    -1.88035477551078244854E-15, -3.81440307243700780478E-15, 1.04202769841288027642E-14,
    4.27244001671195135429E-14,  -2.10154184277266431302E-14, -4.08355111109219731823E-13,
    -7.19855177624590851209E-13, 2.03562854414708950722E-12,  1.41258074366137813316E-11,
    3.25260358301548823856E-11,  -1.89749581235054123450E-11, -5.58974346219658380687E-10,
    -3.83538038596423702205E-9,  -2.63146884688951950684E-8,  -2.51223623787020892529E-7,
    -3.88256480887769039346E-6,  -1.10588938762623716291E-4,  -9.76109749136146840777E-3,
    7.78576235018280120474E-1};

// Chebyshev coefficients of K0(x) + log(x / 2) I0(x) in x^2 - 2 on [0, 2], and of
// exp(x) sqrt(x) K0(x) in 8 / x - 2 on (2, inf).
constexpr double kK0Small[] = {1.37446543561352307156e-16, 4.25981614279661018399e-14,
                               1.03496952576338420167e-11, 1.90451637722020886025e-09,
                               2.53479107902614945675e-07, 2.28621210311945178607e-05,
                               1.26461541144692592338e-03, 3.59799365153615016266e-02,
                               3.44289899924628486886e-01, -5.35327393233902768720e-01};
constexpr double kK0Large[] = {
    5.30043377268626276149e-18,  -1.64758043015242134646e-17, 5.21039150503902756861e-17,
    -1.67823109680541210385e-16, 5.51205597852431940784e-16,  -1.84859337734377901440e-15,
    6.34007647740507060557e-15,  -2.22751332699166985548e-14, 8.03289077536357521100e-14,
    -2.98009692317273043925e-13, 1.14034058820847496303e-12,  -4.51459788337394416547e-12,
    1.85594911495471785253e-11,  -7.95748924447710747776e-11, 3.57739728140030116597e-10,
    -1.69753450938905987466e-09, 8.57403401741422608519e-09,  -4.66048989768794782956e-08,
    2.76681363944501510342e-07,  -1.83175552271911948767e-06, 1.39498137188764993662e-05,
    -1.28495495816278026384e-04, 1.56988388573005337491e-03,  -3.14481013119645005427e-02,
    2.44030308206595545468e+00};
// The same for x K1(x) - x log(x / 2) I1(x) on [0, 2] and exp(x) sqrt(x) K1(x) on (2, inf).
constexpr double kK1Small[] = {
    -7.02386347938628759343e-18, -2.42744985051936593393e-15, -6.66690169419932900609e-13,
    -1.41148839263352776110e-10, -2.21338763073472585583e-08, -2.43340614156596823496e-06,
    -1.73028895751305206302e-04, -6.97572385963986435018e-03, -1.22611180822657148235e-01,
    -3.53155960776544875667e-01, 1.52530022733894777053e+00};
constexpr double kK1Large[] = {
    -5.75674448366501715755e-18, 1.79405087314755922667e-17,  -5.68946255844285935196e-17,
    1.83809354436663880070e-16,  -6.05704724837331885336e-16, 2.03870316562433424052e-15,
    -7.01983709041831346144e-15, 2.47715442448130437068e-14,  -8.97670518232499435011e-14,
    3.34841966607842919884e-13,  -1.28917396095102890680e-12, 5.13963967348173025100e-12,
    -2.12996783842756842877e-11, 9.21831518760500529508e-11,  -4.19035475934189648750e-10,
    2.01504975519703286596e-09,  -1.03457624656780970260e-08, 5.74108412545004946722e-08,
    -3.50196060308781257119e-07, 2.40648494783721712015e-06,  -1.93619797416608296024e-05,
    1.95215518471351631108e-04,  -2.85781685962277938680e-03, 1.03923736576817238437e-01,
    2.72062619048444266945e+00};

// Rounds an intermediate result the way the kernel being matched does; identity by default.
using Rounding = std::function<Value(Value)>;
Value NoRounding(Value value) { return value; }

// Sum of c_i T_i(y / 2) by Clenshaw's recurrence, halving the leading term (Cephes' chbevl).
Value ChebyshevSeries(FunctionBuilder& b, Value y, std::span<const double> coefficients,
                      const Rounding& r = NoRounding) {
  Value b0 = r(FullLike(b, coefficients[0], y)), b1 = FullLike(b, 0.0, y), b2 = b1;
  for (size_t i = 1; i < coefficients.size(); ++i) {
    b2 = b1;
    b1 = b0;
    b0 = r(b.Add(r(b.Subtract(r(b.Multiply(y, b1)), b2)), r(FullLike(b, coefficients[i], y))));
  }
  return r(b.Multiply(FullLike(b, 0.5, y), r(b.Subtract(b0, b2))));
}

// exp(-|x|) I_order(|x|) (divided by |x| for order 1 below 8), both series selected by |x| <= 8.
Value ScaledBessel(FunctionBuilder& b, Value ax, std::span<const double> small,
                   std::span<const double> large, const Rounding& r = NoRounding) {
  Value eight = FullLike(b, 8.0, ax), two = FullLike(b, 2.0, ax);
  Value near = b.Compare(ax, eight, Direction::kLe);
  Value small_value = ChebyshevSeries(b, r(b.Subtract(r(b.Divide(ax, two)), two)), small, r);
  // The large-argument series runs on max(|x|, 8) so that the unused branch stays finite.
  Value far_x = b.Maximum(ax, eight);
  // (CPU's half-type kernel divides by a float square root here: no rounding before the end.)
  Value large_value = b.Divide(
      ChebyshevSeries(b, r(b.Subtract(r(b.Divide(FullLike(b, 32.0, ax), far_x)), two)), large, r),
      b.Sqrt(far_x));
  return b.Select(near, small_value, large_value);
}

// The modified Bessel functions I0, I1 and their exponentially scaled forms.
template <int kOrder, bool kScaled>
Value ModifiedBessel(FunctionBuilder& b, Value x) {
  Value ax = b.Abs(x);
  Value result;
  if (kOrder == 0) {
    result = ScaledBessel(b, ax, kI0eSmall, kI0eLarge);
  } else {
    Value series = ScaledBessel(b, ax, kI1eSmall, kI1eLarge);
    // The small-argument series of I1 is of I1(x) / x.
    result =
        b.Select(b.Compare(ax, FullLike(b, 8.0, ax), Direction::kLe), b.Multiply(series, ax), series);
    result = b.Select(b.Compare(x, FullLike(b, 0.0, x), Direction::kLt), b.Negate(result), result);
  }
  if (!kScaled) result = b.Multiply(result, b.Exp(ax));
  return result;
}

using UnaryFunction = Value (*)(FunctionBuilder&, Value);

// A float function of one operand: integers promote to the default float, half types compute in
// f32 and round once.
template <UnaryFunction kFunction>
std::vector<Value> SpecialUnary(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  const c10::ScalarType result =
      c10::isFloatingType(dtype) ? dtype : c10::get_default_dtype_as_scalartype();
  Value x = context.Convert(operands[0].value, ComputeDtype(result));
  return {context.Convert(kFunction(context.builder(), x), result)};
}
TORCH_TPU_LOWERING((SpecialUnary<ModifiedBessel<0, false>>), "aten::i0", "aten::i0_",
                   "aten::i0.out");

// special_i0e(self): unlike i0, i1 and i1e, CPU has no float overload for half types here and
// evaluates the series in the half type itself, rounding after every operation; so does this.
std::vector<Value> I0e(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  const c10::ScalarType result =
      c10::isFloatingType(dtype) ? dtype : c10::get_default_dtype_as_scalartype();
  auto& b = context.builder();
  Value x = context.Convert(operands[0].value, ComputeDtype(result));
  const Rounding round = [&](Value value) { return RoundThrough(context, value, result); };
  return {context.Convert(ScaledBessel(b, b.Abs(x), kI0eSmall, kI0eLarge, round), result)};
}
TORCH_TPU_LOWERING(I0e, "aten::special_i0e", "aten::special_i0e.out");
TORCH_TPU_LOWERING((SpecialUnary<ModifiedBessel<1, false>>), "aten::special_i1",
                   "aten::special_i1.out");
TORCH_TPU_LOWERING((SpecialUnary<ModifiedBessel<1, true>>), "aten::special_i1e",
                   "aten::special_i1e.out");

// special_modified_bessel_i0/i1 are I0 and I1 under their special-namespace names.
TORCH_TPU_LOWERING((SpecialUnary<ModifiedBessel<0, false>>), "aten::special_modified_bessel_i0",
                   "aten::special_modified_bessel_i0.out");
TORCH_TPU_LOWERING((SpecialUnary<ModifiedBessel<1, false>>), "aten::special_modified_bessel_i1",
                   "aten::special_modified_bessel_i1.out");

// The modified Bessel functions of the second kind K0, K1 (times exp(x) when kScaled), defined
// for x >= 0: inf at 0, NaN below.
template <int kOrder, bool kScaled>
Value ModifiedBesselK(FunctionBuilder& b, Value x) {
  Value zero = FullLike(b, 0.0, x), two = FullLike(b, 2.0, x);
  // Each branch runs on an argument clamped into its own range so the unused one stays finite.
  Value near_x = b.Clamp(FullLike(b, 1e-30, x), x, two);
  Value far_x = b.Maximum(x, two);
  Value log_half = b.Log(b.Multiply(FullLike(b, 0.5, x), near_x));
  Value y = b.Subtract(b.Multiply(near_x, near_x), two);
  Value near;
  if (kOrder == 0) {
    near = b.Subtract(ChebyshevSeries(b, y, kK0Small),
                      b.Multiply(log_half, ModifiedBessel<0, false>(b, near_x)));
  } else {
    near = b.Add(b.Multiply(log_half, ModifiedBessel<1, false>(b, near_x)),
                 b.Divide(ChebyshevSeries(b, y, kK1Small), near_x));
  }
  if (kScaled) near = b.Multiply(near, b.Exp(near_x));
  Value far = b.Divide(ChebyshevSeries(b, b.Subtract(b.Divide(FullLike(b, 8.0, x), far_x), two),
                                       kOrder == 0 ? std::span<const double>(kK0Large)
                                                   : std::span<const double>(kK1Large)),
                       b.Sqrt(far_x));
  if (!kScaled) far = b.Multiply(far, b.Exp(b.Negate(far_x)));
  Value result = b.Select(b.Compare(x, two, Direction::kLe), near, far);
  result = b.Select(b.Compare(x, zero, Direction::kEq), FullLike(b, INFINITY, x), result);
  return b.Select(b.Compare(x, zero, Direction::kLt), FullLike(b, NAN, x), result);
}
TORCH_TPU_LOWERING((SpecialUnary<ModifiedBesselK<0, false>>), "aten::special_modified_bessel_k0",
                   "aten::special_modified_bessel_k0.out");
TORCH_TPU_LOWERING((SpecialUnary<ModifiedBesselK<1, false>>), "aten::special_modified_bessel_k1",
                   "aten::special_modified_bessel_k1.out");
TORCH_TPU_LOWERING((SpecialUnary<ModifiedBesselK<0, true>>),
                   "aten::special_scaled_modified_bessel_k0",
                   "aten::special_scaled_modified_bessel_k0.out");
TORCH_TPU_LOWERING((SpecialUnary<ModifiedBesselK<1, true>>),
                   "aten::special_scaled_modified_bessel_k1",
                   "aten::special_scaled_modified_bessel_k1.out");

// spherical_bessel_j0(x) = sin(x) / x, by its Taylor series near 0 and 0 at infinity.
Value SphericalBesselJ0(FunctionBuilder& b, Value x) {
  Value x2 = b.Multiply(x, x);
  // 1 - x^2/3! + x^4/5! - ... through x^12/13!, in Horner form.
  Value series = FullLike(b, 1.0 / 6227020800.0, x);
  for (double c :
       {-1.0 / 39916800.0, 1.0 / 362880.0, -1.0 / 5040.0, 1.0 / 120.0, -1.0 / 6.0, 1.0}) {
    series = b.Add(FullLike(b, c, x), b.Multiply(x2, series));
  }
  Value direct = b.Divide(b.Sine(x), x);
  Value result = b.Select(b.Compare(b.Abs(x), FullLike(b, 0.5, x), Direction::kLt), series, direct);
  return b.Select(b.Compare(b.Abs(x), FullLike(b, INFINITY, x), Direction::kEq), FullLike(b, 0.0, x),
                  result);
}
TORCH_TPU_LOWERING(SpecialUnary<SphericalBesselJ0>, "aten::special_spherical_bessel_j0",
                   "aten::special_spherical_bessel_j0.out");

// Hurwitz zeta(x, q) = sum_k (q + k)^-x for x > 1: kTerms terms summed directly, then the
// Euler-Maclaurin tail at w = q + kTerms with Bernoulli-number corrections. Enough terms that w
// is at least 9 for q >= -9 (CPU sums until its terms reach q + 9 as well).
constexpr int kZetaTerms = 19;
// (2k)! / B_2k: the Euler-Maclaurin denominators.
constexpr std::array<double, 12> kZetaDenominators = {12.0,
                                                      -720.0,
                                                      30240.0,
                                                      -1209600.0,
                                                      47900160.0,
                                                      -1.8924375803183791606e9,
                                                      7.47242496e10,
                                                      -2.950130727918164224e12,
                                                      1.1646782814350067249e14,
                                                      -4.5979787224074726105e15,
                                                      1.8152105401943546773e17,
                                                      -7.1661652561756670113e18};

Value Zeta(FunctionBuilder& b, Value x, Value q) {
  Value one = FullLike(b, 1.0, x), zero = FullLike(b, 0.0, x);
  Value sum = b.Power(q, b.Negate(x));
  Value a = q;
  Value term = zero;
  for (int i = 0; i < kZetaTerms; ++i) {
    a = b.Add(a, one);
    term = b.Power(a, b.Negate(x));
    sum = b.Add(sum, term);
  }
  Value w = a;
  sum = b.Add(sum, b.Divide(b.Multiply(term, w), b.Subtract(x, one)));
  sum = b.Subtract(sum, b.Multiply(FullLike(b, 0.5, x), term));
  Value factor = one;  // x (x + 1) ... (x + 2i), built up two factors at a time
  Value k = zero;
  for (double denominator : kZetaDenominators) {
    factor = b.Multiply(factor, b.Add(x, k));
    term = b.Divide(term, w);
    sum = b.Add(sum, b.Divide(b.Multiply(factor, term), FullLike(b, denominator, x)));
    k = b.Add(k, one);
    factor = b.Multiply(factor, b.Add(x, k));
    term = b.Divide(term, w);
    k = b.Add(k, one);
  }
  // Domain: a pole at x == 1, NaN below; at q a non-positive integer a pole; for other q <= 0
  // only integer x is defined.
  Value nan = FullLike(b, NAN, x), inf = FullLike(b, INFINITY, x);
  Value q_nonpositive = b.Compare(q, zero, Direction::kLe);
  Value q_integer = b.Compare(q, b.Floor(q), Direction::kEq);
  Value x_integer = b.Compare(x, b.Floor(x), Direction::kEq);
  Value result = b.Select(b.And(q_nonpositive, b.Not(x_integer)), nan, sum);
  result = b.Select(b.And(q_nonpositive, q_integer), inf, result);
  result = b.Select(b.Compare(x, one, Direction::kLt), nan, result);
  return b.Select(b.Compare(x, one, Direction::kEq), inf, result);
}

// special_zeta(self, other): zeta(x = self, q = other) of the promoted operands.
std::vector<Value> SpecialZeta(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType promoted = context.PromotedType(operands.subspan(0, 2));
  const c10::ScalarType result =
      c10::isFloatingType(promoted) ? promoted : c10::get_default_dtype_as_scalartype();
  auto values =
      OpmathOperands(context, operands.subspan(0, 2), result, HalfScalars::kRoundedToDtype);
  return {context.Convert(Zeta(context.builder(), values[0], values[1]), result)};
}
TORCH_TPU_LOWERING(SpecialZeta, "aten::special_zeta", "aten::special_zeta.out");

// digamma has poles of opposite signs on each side of 0: -inf at +0, +inf at -0 (CPU's values).
Value Digamma(FunctionBuilder& b, Value x) {
  return b.Select(b.Compare(x, FullLike(b, 0.0, x), Direction::kEq), b.Divide(FullLike(b, -1.0, x), x),
                  b.Digamma(x));
}
TORCH_TPU_LOWERING(SpecialUnary<Digamma>, "aten::digamma", "aten::digamma_", "aten::digamma.out");

// polygamma(int n, self): digamma for n == 0, else (-1)^(n+1) n! zeta(n + 1, x).
std::vector<Value> Polygamma(LoweringContext& context, std::span<const Operand> operands) {
  const int64_t n = context.Int(operands[0]);
  TORCH_CHECK(n >= 0, context.op_name(), ": polygamma(n, x) does not support negative n.");
  const c10::ScalarType dtype = operands[1].dtype;
  const c10::ScalarType result =
      c10::isFloatingType(dtype) ? dtype : c10::get_default_dtype_as_scalartype();
  auto& b = context.builder();
  Value x = context.Convert(operands[1].value, ComputeDtype(result));
  if (n == 0) return {context.Convert(Digamma(b, x), result)};
  const double sign = n % 2 == 1 ? 1.0 : -1.0;
  const double scale = sign * std::exp(std::lgamma(static_cast<double>(n) + 1.0));
  Value value = b.Multiply(FullLike(b, scale, x), Zeta(b, FullLike(b, static_cast<double>(n + 1), x), x));
  return {context.Convert(value, result)};
}
TORCH_TPU_LOWERING(Polygamma, "aten::polygamma", "aten::polygamma.out");

// erfcx(x) = exp(x^2) erfc(x). For x >= 2 the continued fraction
// erfc(x) exp(x^2) sqrt(pi) = 1 / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...)))), 20 levels deep,
// is accurate to 1e-9; below 2 erfc has no cancellation to fear; negative x use erfcx(-x).
constexpr int kErfcxDepth = 20;

Value Erfcx(FunctionBuilder& b, Value x) {
  Value ax = b.Abs(x);
  Value two = FullLike(b, 2.0, x), one = FullLike(b, 1.0, x);
  Value far_x = b.Maximum(ax, two);
  Value t = far_x;
  for (int k = kErfcxDepth; k > 0; --k) t = b.Add(far_x, b.Divide(FullLike(b, k / 2.0, x), t));
  Value far = b.Divide(FullLike(b, M_2_SQRTPI / 2.0, x), t);
  Value near = b.Multiply(b.Exp(b.Multiply(ax, ax)), b.Subtract(one, b.Erf(ax)));
  Value positive = b.Select(b.Compare(ax, two, Direction::kGe), far, near);
  // erfcx(-a) = 2 exp(a^2) - erfcx(a), which overflows to inf as on CPU.
  Value negative = b.Subtract(b.Multiply(two, b.Exp(b.Multiply(ax, ax))), positive);
  return b.Select(b.Compare(x, FullLike(b, 0.0, x), Direction::kLt), negative, positive);
}
TORCH_TPU_LOWERING(SpecialUnary<Erfcx>, "aten::special_erfcx", "aten::special_erfcx.out");

// log of the standard normal CDF: log(erfcx(-x / sqrt 2) / 2) - x^2 / 2 in the lower tail, where
// the CDF underflows, log1p(-erfc(x / sqrt 2) / 2) elsewhere.
Value LogNdtr(FunctionBuilder& b, Value x) {
  Value t = b.Multiply(x, FullLike(b, M_SQRT1_2, x));
  Value lower =
      b.Subtract(b.Log(b.Multiply(Erfcx(b, b.Negate(t)), FullLike(b, 0.5, x))), b.Multiply(t, t));
  Value upper_tail = b.Multiply(FullLike(b, 0.5, x), b.Subtract(FullLike(b, 1.0, x), b.Erf(t)));
  Value upper = b.Log1p(b.Negate(upper_tail));
  return b.Select(b.Compare(x, FullLike(b, -1.0, x), Direction::kLt), lower, upper);
}
TORCH_TPU_LOWERING(SpecialUnary<LogNdtr>, "aten::special_log_ndtr", "aten::special_log_ndtr.out");

// ndtri(p): the standard normal quantile. In the lower half, a rational approximation in
// sqrt(-2 log p) (Abramowitz & Stegun 26.2.23, error below 5e-4) refined by two Newton steps on
// log_ndtr(x) = log p, which stay accurate deep in the tail where p's erfinv form rounds 2p - 1
// to -1; the upper half by symmetry. Exactly +-inf at 1 and 0, NaN outside [0, 1].
Value Ndtri(FunctionBuilder& b, Value p) {
  Value one = FullLike(b, 1.0, p), zero = FullLike(b, 0.0, p), half = FullLike(b, 0.5, p);
  Value lower_half = b.Compare(p, half, Direction::kLt);
  Value q = b.Select(lower_half, p, b.Subtract(one, p));
  Value log_q = b.Log(q);
  Value t = b.Sqrt(b.Multiply(FullLike(b, -2.0, p), log_q));
  auto polynomial = [&](std::initializer_list<double> coefficients) {
    Value sum = zero;
    for (auto c = std::rbegin(coefficients); c != std::rend(coefficients); ++c) {
      sum = b.Add(b.Multiply(sum, t), FullLike(b, *c, p));
    }
    return sum;
  };
  Value x = b.Negate(b.Subtract(t, b.Divide(polynomial({2.515517, 0.802853, 0.010328}),
                                            polynomial({1.0, 1.432788, 0.189269, 0.001308}))));
  for (int step = 0; step < 2; ++step) {
    Value slope_inverse = b.Multiply(Erfcx(b, b.Multiply(x, FullLike(b, -M_SQRT1_2, p))),
                                     FullLike(b, std::sqrt(M_PI / 2.0), p));
    x = b.Subtract(x, b.Multiply(b.Subtract(LogNdtr(b, x), log_q), slope_inverse));
  }
  Value value = b.Select(lower_half, x, b.Negate(x));
  value = b.Select(b.Compare(p, zero, Direction::kEq), FullLike(b, -INFINITY, p), value);
  value = b.Select(b.Compare(p, one, Direction::kEq), FullLike(b, INFINITY, p), value);
  Value outside = b.Or(b.Compare(p, zero, Direction::kLt), b.Compare(p, one, Direction::kGt));
  return b.Select(outside, FullLike(b, NAN, p), value);
}
TORCH_TPU_LOWERING(SpecialUnary<Ndtri>, "aten::special_ndtri", "aten::special_ndtri.out");

}  // namespace
}  // namespace torch_tpu::lowering
