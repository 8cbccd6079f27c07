// Bessel functions of the first and second kind of orders 0 and 1 (special_bessel_j0/j1/y0/y1),
// and the Airy function Ai (special_airy_ai), a Bessel function of order 1/3 in disguise.
//
// CPU evaluates Cephes' rational approximations: a rational function of x^2 up to 5, and above it
// the Hankel asymptotic form, with the phase and amplitude as rational functions of 25 / x^2.
// Both branches are computed for every element and selected; coefficient tables are Cephes'
// published ones, evaluated by Horner's rule in CPU's order.
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "lowering/context.h"
#include "lowering/linalg_common.h"
#include "lowering/opmath.h"
#include "lowering/series.h"

namespace torch_tpu::lowering {
namespace {

// Asymptotic amplitude (P) and phase (Q) numerators and denominators, order 0.
constexpr double kPP0[] = {7.96936729297347051624e-04, 8.28352392107440799803e-02,
                           1.23953371646414299388e+00, 5.44725003058768775090e+00,
                           8.74716500199817011941e+00, 5.30324038235394892183e+00,
                           9.99999999999999997821e-01};
constexpr double kPQ0[] = {9.24408810558863637013e-04, 8.56288474354474431428e-02,
                           1.25352743901058953537e+00, 5.47097740330417105182e+00,
                           8.76190883237069594232e+00, 5.30605288235394617618e+00,
                           1.00000000000000000218e+00};
constexpr double kQP0[] = {-1.13663838898469149931e-02, -1.28252718670509318512e+00,
                           -1.95539544257735972385e+01, -9.32060152123768231369e+01,
                           -1.77681167980488050595e+02, -1.47077505154951170175e+02,
                           -5.14105326766599330220e+01, -6.05014350600728481186e+00};
constexpr double kQQ0[] = {6.43178256118178023184e+01, 8.56430025976980587198e+02,
                           3.88240183605401609683e+03, 7.24046774195652478189e+03,
                           5.93072701187316984827e+03, 2.06209331660327847417e+03,
                           2.42005740240291393179e+02};
// The same for order 1.
constexpr double kPP1[] = {7.62125616208173112003e-04, 7.31397056940917570436e-02,
                           1.12719608129684925192e+00, 5.11207951146807644818e+00,
                           8.42404590141772420927e+00, 5.21451598682361504063e+00,
                           1.00000000000000000254e+00};
constexpr double kPQ1[] = {5.71323128072548699714e-04, 6.88455908754495404082e-02,
                           1.10514232634061696926e+00, 5.07386386128601488557e+00,
                           8.39985554327604159757e+00, 5.20982848682361821619e+00,
                           9.99999999999999997461e-01};
constexpr double kQP1[] = {5.10862594750176621635e-02, 4.98213872951233449420e+00,
                           7.58238284132545283818e+01, 3.66779609360150777800e+02,
                           7.10856304998926107277e+02, 5.97489612400613639965e+02,
                           2.11688757100572135698e+02, 2.52070205858023719784e+01};
constexpr double kQQ1[] = {7.42373277035675149943e+01, 1.05644886038262816351e+03,
                           4.98641058337653607651e+03, 9.56231892404756170795e+03,
                           7.99704160447350683650e+03, 2.82619278517639096600e+03,
                           3.36093607810698293419e+02};
// J0 and J1 on [0, 5]: rational functions of x^2 (times the factors of the first two zeros).
constexpr double kRP0[] = {-4.79443220978201773821e+09, 1.95617491946556577543e+12,
                           -2.49248344360967716204e+14, 9.70862251047306323952e+15};
constexpr double kRQ0[] = {4.99563147152651017219e+02, 1.73785401676374683123e+05,
                           4.84409658339962045305e+07, 1.11855537045356834862e+10,
                           2.11277520115489217587e+12, 3.10518229857422583814e+14,
                           3.18121955943204943306e+16, 1.71086294081043136091e+18};
constexpr double kRP1[] = {-8.99971225705559398224e+08, 4.52228297998194034323e+11,
                           -7.27494245221818276015e+13, 3.68295732863852883286e+15};
constexpr double kRQ1[] = {6.20836478118054335476e+02, 2.56987256757748830383e+05,
                           8.35146791431949253037e+07, 2.21511595479792499675e+10,
                           4.74914122079991414898e+12, 7.84369607876235854894e+14,
                           8.95222336184627338078e+16, 5.32278620332680085395e+18};
// Y0 and Y1 on (0, 5], less their log terms.
constexpr double kYP0[] = {1.55924367855235737965e+04,  -1.46639295903971606143e+07,
                           5.43526477051876500413e+09,  -9.82136065717911466409e+11,
                           8.75906394395366999549e+13,  -3.46628303384729719441e+15,
                           4.42733268572569800351e+16,  -1.84950800436986690637e+16};
constexpr double kYQ0[] = {1.04128353664259848412e+03, 6.26107330137134956842e+05,
                           2.68919633393814121987e+08, 8.64002487103935000337e+10,
                           2.02979612750105546709e+13, 3.17157752842975028269e+15,
                           2.50596256172653059228e+17};
constexpr double kYP1[] = {1.26320474790178026440e+09,  -6.47355876379160291031e+11,
                           1.14509511541823727583e+14,  -8.12770255501325109621e+15,
                           2.02439475713594898196e+17,  -7.78877196265950026825e+17};
constexpr double kYQ1[] = {5.94301592346128195359e+02, 2.35564092943068577943e+05,
                           7.34811944459721705660e+07, 1.87601316108706159478e+10,
                           3.88231277496238566008e+12, 6.20557727146953693363e+14,
                           6.87141087355300489866e+16, 3.97270608116560655612e+18};

constexpr double kTwoOverPi = 0.636619772367581343075535053490057448;
constexpr double kSqrtTwoOverPi = 0.797884560802865355879892119868763737;

// The Hankel form above 5: sqrt(2 / (pi x)) (P cos(x - phase) -/+ 5 / x Q sin(x - phase)) for J,
// with sin and cos exchanged and the sign flipped for Y.
template <int kOrder, bool kSecondKind>
Value Asymptotic(FunctionBuilder& b, Value x) {
  Value five = FullLike(b, 5.0, x);
  // CPU forms 25 / x^2 as 25 / (x * x) for order 0 and as (5 / x) (5 / x) for order 1.
  Value z = kOrder == 0 ? b.Divide(FullLike(b, 25.0, x), b.Multiply(x, x))
                        : b.Multiply(b.Divide(five, x), b.Divide(five, x));
  const auto& pp = kOrder == 0 ? kPP0 : kPP1;
  const auto& pq = kOrder == 0 ? kPQ0 : kPQ1;
  const auto& qp = kOrder == 0 ? kQP0 : kQP1;
  const auto& qq = kOrder == 0 ? kQQ0 : kQQ1;
  Value amplitude = b.Divide(Horner(b, z, pp), Horner(b, z, pq));
  Value phase = b.Divide(Horner(b, z, qp), Horner(b, z, qq));
  Value shifted = b.Subtract(x, FullLike(b, kOrder == 0 ? M_PI / 4 : 3 * M_PI / 4, x));
  Value sin = b.Sine(shifted), cos = b.Cosine(shifted);
  Value correction = b.Multiply(b.Multiply(b.Divide(five, x), phase), kSecondKind ? cos : sin);
  Value main = b.Multiply(amplitude, kSecondKind ? sin : cos);
  Value sum = kSecondKind ? b.Add(main, correction) : b.Subtract(main, correction);
  return b.Divide(b.Multiply(sum, FullLike(b, kSqrtTwoOverPi, x)), b.Sqrt(x));
}

// J0 or J1 of x >= 0.
template <int kOrder>
Value FirstKindNonnegative(FunctionBuilder& b, Value x) {
  Value x2 = b.Multiply(x, x);
  Value small;
  if (kOrder == 0) {
    Value rational = b.Multiply(
        b.Multiply(b.Subtract(x2, FullLike(b, 5.78318596294678452118e+00, x)),
                   b.Subtract(x2, FullLike(b, 3.04712623436620863991e+01, x))),
        Horner(b, x2, kRP0));
    small = b.Divide(rational, Horner(b, x2, kRQ0));
    Value tiny = b.Subtract(FullLike(b, 1.0, x), b.Divide(x2, FullLike(b, 4.0, x)));
    small = b.Select(b.Compare(x, FullLike(b, 1e-5, x), Direction::kLt), tiny, small);
  } else {
    small = b.Multiply(b.Divide(Horner(b, x2, kRP1), Horner(b, x2, kRQ1)), x);
    small = b.Multiply(b.Multiply(small, b.Subtract(x2, FullLike(b, 1.46819706421238932572e+01, x))),
                       b.Subtract(x2, FullLike(b, 4.92184563216946036703e+01, x)));
  }
  return b.Select(b.Compare(x, FullLike(b, 5.0, x), Direction::kLe), small,
                  Asymptotic<kOrder, false>(b, x));
}

Value BesselJ0(FunctionBuilder& b, Value x) { return FirstKindNonnegative<0>(b, b.Abs(x)); }

// J1 is odd.
Value BesselJ1(FunctionBuilder& b, Value x) {
  Value value = FirstKindNonnegative<1>(b, b.Abs(x));
  return b.Select(b.Compare(x, FullLike(b, 0.0, x), Direction::kLt), b.Negate(value), value);
}

// Y0, Y1: -inf at 0 and NaN below, as CPU returns.
template <int kOrder>
Value BesselY(FunctionBuilder& b, Value x) {
  Value x2 = b.Multiply(x, x);
  Value log_term = b.Multiply(FullLike(b, kTwoOverPi, x), b.Log(x));
  Value small;
  if (kOrder == 0) {
    small = b.Add(b.Divide(Horner(b, x2, kYP0), Horner(b, x2, kYQ0)),
                  b.Multiply(log_term, FirstKindNonnegative<0>(b, x)));
  } else {
    Value j1_log = b.Subtract(b.Multiply(FirstKindNonnegative<1>(b, x), b.Log(x)),
                              b.Divide(FullLike(b, 1.0, x), x));
    small = b.Add(b.Multiply(x, b.Divide(Horner(b, x2, kYP1), Horner(b, x2, kYQ1))),
                  b.Multiply(FullLike(b, kTwoOverPi, x), j1_log));
  }
  Value zero = FullLike(b, 0.0, x);
  small = b.Select(b.Compare(x, zero, Direction::kLt),
                   FullLike(b, std::numeric_limits<double>::quiet_NaN(), x), small);
  small = b.Select(b.Compare(x, zero, Direction::kEq),
                   FullLike(b, -std::numeric_limits<double>::infinity(), x), small);
  return b.Select(b.Compare(x, FullLike(b, 5.0, x), Direction::kLe), small,
                  Asymptotic<kOrder, true>(b, x));
}

// Airy Ai: Cephes' asymptotic rational forms below -2.09 (oscillating) and from 2.09 up
// (decaying), and between them the Maclaurin series f(x^3) Ai(0) - g(x^3) |Ai'(0)|, summed, as CPU
// does, until the last term of f is below 2^-53 relative to f (a while loop over the elements
// still summing, so that each stops after CPU's number of terms).
constexpr double kAiryAN[] = {3.46538101525629032477e-01, 1.20075952739645805542e+01,
                              7.62796053615234516538e+01, 1.68089224934630576269e+02,
                              1.59756391350164413639e+02, 7.05360906840444183113e+01,
                              1.40264691163389668864e+01, 9.99999999999999995305e-01};
constexpr double kAiryAD[] = {5.67594532638770212846e-01, 1.47562562584847203173e+01,
                              8.45138970141474626562e+01, 1.77318088145400459522e+02,
                              1.64234692871529701831e+02, 7.14778400825575695274e+01,
                              1.40959135607834029598e+01, 1.00000000000000000470e+00};
constexpr double kAiryAFN[] = {-1.31696323418331795333e-01, -6.26456544431912369773e-01,
                               -6.93158036036933542233e-01, -2.79779981545119124951e-01,
                               -4.91900132609500318020e-02, -4.06265923594885404393e-03,
                               -1.59276496239262096340e-04, -2.77649108155232920844e-06,
                               -1.67787698489114633780e-08};
constexpr double kAiryAFD[] = {1.33560420706553243746e+01, 3.26825032795224613948e+01,
                               2.67367040941499554804e+01, 9.18707402907259625840e+00,
                               1.47529146771666414581e+00, 1.15687173795188044134e-01,
                               4.40291641615211203805e-03, 7.54720348287414296618e-05,
                               4.51850092970580378464e-07};
constexpr double kAiryAGN[] = {1.97339932091685679179e-02, 3.91103029615688277255e-01,
                               1.06579897599595591108e+00, 9.39169229816650230044e-01,
                               3.51465656105547619242e-01, 6.33888919628925490927e-02,
                               5.85804113048388458567e-03, 2.82851600836737019778e-04,
                               6.98793669997260967291e-06, 8.11789239554389293311e-08,
                               3.41551784765923618484e-10};
constexpr double kAiryAGD[] = {9.30892908077441974853e+00, 1.98352928718312140417e+01,
                               1.55646628932864612953e+01, 5.47686069422975497931e+00,
                               9.54293611618961883998e-01, 8.64580826352392193095e-02,
                               4.12656523824222607191e-03, 1.01259085116509135510e-04,
                               1.17166733214413521882e-06, 4.91834570062930015649e-09};
constexpr double kOneOverSqrtPi = 5.64189583547756286948e-01;
constexpr double kAiryAtZero = 0.355028053887817239260;          // Ai(0)
constexpr double kAiryDerivativeAtZero = 0.258819403792806798405;  // -Ai'(0)
constexpr double kAirySeriesTolerance = 1.11022302462515654042e-16;

// The Maclaurin series part; its state is (f, g, k, m, n, t).
Value AiryAiSeries(FunctionBuilder& b, Value x) {
  Value z = b.Multiply(b.Multiply(x, x), x);
  std::vector<Value> state = b.While(
      {FullLike(b, 1.0, x), x, FullLike(b, 1.0, x), FullLike(b, 1.0, x), x, FullLike(b, 1.0, x), z},
      [](FunctionBuilder& body, std::span<const Value> s) {
        Value active =
            body.Compare(s[5], FullLike(body, kAirySeriesTolerance, s[5]), Direction::kGt);
        return std::vector<Value>{linalg::Any(body, active)};
      },
      [](FunctionBuilder& body, std::span<const Value> s) {
        Value f = s[0], g = s[1], k = s[2], m = s[3], n = s[4], t = s[5], z = s[6];
        Value one = FullLike(body, 1.0, k);
        m = body.Multiply(m, z);
        k = body.Add(k, one);
        m = body.Divide(m, k);
        n = body.Multiply(n, z);
        k = body.Add(k, one);
        n = body.Divide(n, k);
        m = body.Divide(m, k);
        Value next_f = body.Add(f, m);
        k = body.Add(k, one);
        n = body.Divide(n, k);
        Value next_g = body.Add(g, n);
        Value next_t = body.Abs(body.Divide(m, next_f));
        Value active = body.Compare(t, FullLike(body, kAirySeriesTolerance, t), Direction::kGt);
        auto keep = [&](Value next, Value previous) { return body.Select(active, next, previous); };
        return std::vector<Value>{keep(next_f, f), keep(next_g, g), keep(k, s[2]),
                                  keep(m, s[3]),   keep(n, s[4]),   keep(next_t, t), z};
      });
  return b.Subtract(b.Multiply(FullLike(b, kAiryAtZero, x), state[0]),
                    b.Multiply(FullLike(b, kAiryDerivativeAtZero, x), state[1]));
}

Value AiryAi(FunctionBuilder& b, Value x) {
  // Below -2.09: amplitude and phase corrections as rational functions of z^2, z = 1 / zeta.
  Value negative =
      b.Select(b.Compare(x, FullLike(b, -2.09, x), Direction::kLt), x, FullLike(b, -3.0, x));
  Value zeta = b.Divide(
      b.Multiply(b.Multiply(FullLike(b, -2.0, x), negative), b.Sqrt(b.Negate(negative))),
      FullLike(b, 3.0, x));
  Value z = b.Divide(FullLike(b, 1.0, x), zeta);
  Value z2 = b.Multiply(z, z);
  Value t = b.Add(zeta, FullLike(b, 0.25 * M_PI, x));
  Value amplitude = b.Add(FullLike(b, 1.0, x), b.Divide(b.Multiply(z2, Horner(b, z2, kAiryAFN)),
                                                     Horner(b, z2, kAiryAFD)));
  Value phase = b.Divide(b.Multiply(z, Horner(b, z2, kAiryAGN)), Horner(b, z2, kAiryAGD));
  Value oscillating = b.Multiply(
      b.Divide(FullLike(b, kOneOverSqrtPi, x), b.Sqrt(b.Sqrt(b.Negate(negative)))),
      b.Subtract(b.Multiply(b.Sine(t), amplitude), b.Multiply(b.Cosine(t), phase)));
  // From 2.09 up: a rational function of 1 / zeta times the exponential decay.
  Value positive =
      b.Select(b.Compare(x, FullLike(b, 2.09, x), Direction::kGe), x, FullLike(b, 3.0, x));
  Value zeta_positive = b.Divide(
      b.Multiply(b.Multiply(FullLike(b, 2.0, x), positive), b.Sqrt(positive)), FullLike(b, 3.0, x));
  Value inverse = b.Divide(FullLike(b, 1.0, x), zeta_positive);
  Value decaying = b.Divide(
      b.Multiply(FullLike(b, kOneOverSqrtPi, x),
                 b.Divide(Horner(b, inverse, kAiryAN), Horner(b, inverse, kAiryAD))),
      b.Multiply(b.Multiply(FullLike(b, 2.0, x), b.Sqrt(b.Sqrt(positive))), b.Exp(zeta_positive)));
  // The series only where it is used: elsewhere its terms would not shrink as fast.
  Value in_series_range = b.And(b.Compare(x, FullLike(b, -2.09, x), Direction::kGe),
                                b.Compare(x, FullLike(b, 2.09, x), Direction::kLt));
  Value central = b.Select(in_series_range, x, FullLike(b, 0.0, x));
  Value result = AiryAiSeries(b, central);
  result = b.Select(b.Compare(x, FullLike(b, -2.09, x), Direction::kLt), oscillating, result);
  result = b.Select(b.Compare(x, FullLike(b, 2.09, x), Direction::kGe), decaying, result);
  result = b.Select(b.Compare(x, FullLike(b, 103.892, x), Direction::kGt), FullLike(b, 0.0, x),
                    result);
  // NaN stays NaN (the series was given 0 for it); infinities are NaN on CPU.
  return b.Select(b.IsFinite(x), result, FullLike(b, std::numeric_limits<double>::quiet_NaN(), x));
}

using BesselFunction = Value (*)(FunctionBuilder&, Value);
constexpr char kJ0Kernel[] = "bessel_j0_cpu";
constexpr char kJ1Kernel[] = "bessel_j1_cpu";
constexpr char kY0Kernel[] = "bessel_y0_cpu";
constexpr char kY1Kernel[] = "bessel_y1_cpu";
constexpr char kAiryAiKernel[] = "airy_ai_cpu";

// special_bessel_{j,y}{0,1}(self): integers promote to the default float; CPU's kernels (named
// in its error for other dtypes) exist for float and double only.
template <BesselFunction kFunction, const char* kKernel>
std::vector<Value> Bessel(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  const c10::ScalarType result =
      c10::isFloatingType(dtype) ? dtype : c10::get_default_dtype_as_scalartype();
  CheckKernelDtype(context, result == c10::kFloat || result == c10::kDouble, kKernel, result);
  Value x = context.Convert(operands[0].value, result);
  return {kFunction(context.builder(), x)};
}
TORCH_TPU_LOWERING((Bessel<BesselJ0, kJ0Kernel>), "aten::special_bessel_j0",
                   "aten::special_bessel_j0.out");
TORCH_TPU_LOWERING((Bessel<BesselJ1, kJ1Kernel>), "aten::special_bessel_j1",
                   "aten::special_bessel_j1.out");
TORCH_TPU_LOWERING((Bessel<BesselY<0>, kY0Kernel>), "aten::special_bessel_y0",
                   "aten::special_bessel_y0.out");
TORCH_TPU_LOWERING((Bessel<BesselY<1>, kY1Kernel>), "aten::special_bessel_y1",
                   "aten::special_bessel_y1.out");
TORCH_TPU_LOWERING((Bessel<AiryAi, kAiryAiKernel>), "aten::special_airy_ai",
                   "aten::special_airy_ai.out");

}  // namespace
}  // namespace torch_tpu::lowering
