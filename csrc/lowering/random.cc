// Random ops on the device generator: bits come from rng_bit_generator (THREE_FRY) keyed by the
// (seed, offset) state the executor passes in, so results depend only on the seed and op order.
#include <c10/util/Exception.h>

#include <cmath>

#include "lowering/context.h"
#include "lowering/opmath.h"

namespace torch_tpu::lowering {
namespace {

int MantissaDigits(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kDouble:
      return 53;
    case c10::kFloat:
      return 24;
    case c10::kHalf:
      return 11;
    case c10::kBFloat16:
      return 8;
    default:
      return 24;
  }
}

Value RandomBits(LoweringContext& context, ElementType type, const std::vector<int64_t>& dims) {
  return context.builder()
      .RngBitGenerator(context.rng_state(0), TensorType{type, dims},
                       FunctionBuilder::RngAlgorithm::kThreeFry)
      .second;
}

// Uniform in [0, 1), computed in f32 (f64 for double) with exactly as many random bits as the
// target dtype's mantissa holds, so converting to that dtype can never round up to 1.
Value Uniform01(LoweringContext& context, c10::ScalarType dtype, const std::vector<int64_t>& dims) {
  auto& builder = context.builder();
  const int digits = MantissaDigits(dtype);
  const bool wide = dtype == c10::kDouble;
  const ElementType bits_type = wide ? ElementType::kU64 : ElementType::kU32;
  const ElementType float_type = wide ? ElementType::kF64 : ElementType::kF32;
  Value bits = RandomBits(context, bits_type, dims);
  Value shift = builder.ConstantInt(bits_type, (wide ? 64 : 32) - digits, dims);
  Value integer = builder.ShiftRightLogical(bits, shift);
  Value scale = builder.Constant(float_type, std::ldexp(1.0, -digits), dims);
  return builder.Multiply(builder.Convert(integer, float_type), scale);
}

void CheckFloating(LoweringContext& context, c10::ScalarType dtype) {
  TORCH_CHECK(c10::isFloatingType(dtype), context.op_name(),
              " expects a floating point tensor, but got ", dtype);
}

// uniform(self, float from=0, float to=1, *, Generator? generator)
std::vector<Value> Uniform(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  CheckFloating(context, self.dtype);
  const double from = context.Double(operands[1]);
  const double to = context.Double(operands[2]);
  TORCH_CHECK(from <= to, context.op_name(),
              ": uniform_ expects to return a [from, to) range, "
              "but found from=",
              from, " > to=", to);
  const auto& dims = self.value.dims();
  auto& builder = context.builder();
  Value u = Uniform01(context, self.dtype, dims);
  const c10::ScalarType compute = ComputeDtype(self.dtype);
  Value scaled = builder.Add(context.Constant(from, compute, dims),
                             builder.Multiply(u, context.Constant(to - from, compute, dims)));
  return {context.Convert(scaled, self.dtype)};
}
TORCH_TPU_LOWERING(Uniform, "aten::uniform", "aten::uniform_");

// Standard normal samples of `dims` in `compute` by Box-Muller.
Value StandardNormal(LoweringContext& context, c10::ScalarType compute,
                     const std::vector<int64_t>& dims) {
  auto& builder = context.builder();
  // Two independent uniforms per element: draw [2, dims...] and split.
  std::vector<int64_t> doubled = {2};
  doubled.insert(doubled.end(), dims.begin(), dims.end());
  Value u = Uniform01(context, compute, doubled);
  std::vector<int64_t> start(doubled.size(), 0), limit = doubled, steps(doubled.size(), 1);
  limit[0] = 1;
  Value u1 = builder.Reshape(builder.Slice(u, start, limit, steps), dims);
  start[0] = 1;
  limit[0] = 2;
  Value u2 = builder.Reshape(builder.Slice(u, start, limit, steps), dims);
  // 1 - u1 lies in (0, 1], keeping log finite.
  Value one = context.Constant(1.0, compute, dims);
  Value radius = builder.Sqrt(builder.Multiply(context.Constant(-2.0, compute, dims),
                                               builder.Log(builder.Subtract(one, u1))));
  Value angle = builder.Multiply(context.Constant(2.0 * M_PI, compute, dims), u2);
  return builder.Multiply(radius, builder.Cosine(angle));
}

// normal_functional(self, float mean=0, float std=1, *, Generator? generator)
std::vector<Value> Normal(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  const double mean = context.Double(operands[1]);
  const double std = context.Double(operands[2]);
  TORCH_CHECK(std >= 0.0, context.op_name(), ": normal expects std >= 0.0, but found std ", std);
  auto& builder = context.builder();
  if (c10::isComplexType(self.dtype)) {
    // As on CPU: the (real, imaginary) pairs are drawn as reals with std / sqrt(2), so that the
    // complex variance is std^2.
    const c10::ScalarType part = c10::toRealValueType(self.dtype);
    std::vector<int64_t> pair_dims = self.value.dims();
    pair_dims.push_back(2);
    Value pairs = builder.Add(
        builder.Multiply(StandardNormal(context, part, pair_dims),
                         context.Constant(std / std::sqrt(2.0), part, pair_dims)),
        context.Constant(mean, part, pair_dims));
    std::vector<int64_t> start(pair_dims.size(), 0), limit = pair_dims,
                         step(pair_dims.size(), 1);
    limit.back() = 1;
    Value real = builder.Reshape(builder.Slice(pairs, start, limit, step), self.value.dims());
    start.back() = 1;
    limit.back() = 2;
    Value imag = builder.Reshape(builder.Slice(pairs, start, limit, step), self.value.dims());
    return {builder.Complex(real, imag)};
  }
  CheckFloating(context, self.dtype);
  const auto& dims = self.value.dims();
  const c10::ScalarType compute = ComputeDtype(self.dtype);
  Value z = StandardNormal(context, compute, dims);
  Value result = builder.Add(builder.Multiply(z, context.Constant(std, compute, dims)),
                             context.Constant(mean, compute, dims));
  return {context.Convert(result, self.dtype)};
}
TORCH_TPU_LOWERING(Normal, "aten::normal_functional", "aten::normal_");

// normal.Tensor_Tensor(Tensor mean, Tensor std, *, Generator?), normal.Tensor_float(Tensor mean,
// float std=1, *, Generator?) and normal.float_Tensor(float mean, Tensor std, *, Generator?):
// mean + std * N(0, 1) over the broadcast shape, in the tensor operand's dtype.
std::vector<Value> NormalWithTensors(LoweringContext& context, std::span<const Operand> operands) {
  auto& builder = context.builder();
  const bool mean_is_tensor = operands[0].kind != Operand::Kind::kStatic;
  const bool std_is_tensor = operands[1].kind != Operand::Kind::kStatic;
  const c10::ScalarType dtype = mean_is_tensor ? operands[0].dtype : operands[1].dtype;
  CheckFloating(context, dtype);
  std::vector<std::vector<int64_t>> shapes;
  if (mean_is_tensor) shapes.push_back(operands[0].value.dims());
  if (std_is_tensor) shapes.push_back(operands[1].value.dims());
  const std::vector<int64_t> dims = context.BroadcastShape(shapes);
  const c10::ScalarType compute = ComputeDtype(dtype);
  auto parameter = [&](const Operand& operand) {
    return operand.kind == Operand::Kind::kStatic
               ? context.Constant(context.Double(operand), compute, dims)
               : context.BroadcastTo(context.Convert(operand.value, compute), dims);
  };
  Value mean = parameter(operands[0]);
  Value std = parameter(operands[1]);
  if (std_is_tensor) {
    std::vector<int64_t> all(dims.size());
    for (size_t d = 0; d < dims.size(); ++d) all[d] = static_cast<int64_t>(d);
    Value negative = builder.Compare(std, context.Constant(0.0, compute, dims),
                                     FunctionBuilder::ComparisonDirection::kLt);
    Value any =
        dims.empty()
            ? negative
            : builder.Reduce({negative}, {builder.Constant(stablehlo::ElementType::kPred, 0.0)},
                             all, [](FunctionBuilder& body, std::span<const Value> args) {
                               return std::vector<Value>{body.Or(args[0], args[1])};
                             })[0];
    context.CheckNotViolated(any,
                             context.op_name() + ": normal expects all elements of std >= 0.0");
  } else {
    TORCH_CHECK(context.Double(operands[1]) >= 0.0, context.op_name(),
                ": normal expects std >= 0.0, but found std ", context.Double(operands[1]));
  }
  Value z = StandardNormal(context, compute, dims);
  return {context.Convert(builder.Add(builder.Multiply(z, std), mean), dtype)};
}
TORCH_TPU_LOWERING(NormalWithTensors, "aten::normal.Tensor_Tensor",
                   "aten::normal.Tensor_Tensor_out");
TORCH_TPU_LOWERING(NormalWithTensors, "aten::normal.Tensor_float", "aten::normal.Tensor_float_out");
TORCH_TPU_LOWERING(NormalWithTensors, "aten::normal.float_Tensor", "aten::normal.float_Tensor_out");

// multinomial(self, int num_samples, bool replacement=False, *, Generator?): by the Gumbel-max
// trick, log p + Gumbel noise: its argmax is a draw from p, and its top k are k draws without
// replacement. With replacement every sample gets its own noise.
std::vector<Value> Multinomial(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const Operand& self = operands[0];
  CheckFloating(context, self.dtype);
  const int64_t samples = context.Int(operands[1]);
  const bool replacement = context.Bool(operands[2]);
  const auto& dims = self.value.dims();
  TORCH_CHECK(self.value.rank() == 1 || self.value.rank() == 2, context.op_name(),
              ": prob_dist must be 1 or 2 dim, got ", self.value.type().ToString());
  const int64_t categories = dims.back();
  TORCH_CHECK(categories > 0, context.op_name(), ": number of categories cannot be zero");
  TORCH_CHECK(samples > 0, context.op_name(), ": cannot sample n_sample <= 0 samples");
  TORCH_CHECK(replacement || samples <= categories, context.op_name(),
              ": cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  const int64_t rows = self.value.rank() == 2 ? dims[0] : 1;
  Value p = b.Reshape(context.Convert(self.value, c10::kFloat), {rows, categories});
  // CPU's checks on the distribution's values, as device checks.
  Value zero = context.Constant(0.0, c10::kFloat, {rows, categories});
  Value bad =
      b.Or(b.Compare(p, zero, FunctionBuilder::ComparisonDirection::kLt), b.Not(b.IsFinite(p)));
  auto any = [&](Value pred) {
    std::vector<int64_t> all(pred.rank());
    for (int64_t d = 0; d < pred.rank(); ++d) all[d] = d;
    return b.Reduce({pred}, {b.Constant(ElementType::kPred, 0.0)}, all,
                    [](FunctionBuilder& body, std::span<const Value> args) {
                      return std::vector<Value>{body.Or(args[0], args[1])};
                    })[0];
  };
  context.CheckNotViolated(any(bad), context.op_name() +
                                         ": probability tensor contains either `inf`, `nan` or "
                                         "element < 0");
  Value total = b.Reduce({p}, {b.Constant(ElementType::kF32, 0.0)}, {1},
                         [](FunctionBuilder& body, std::span<const Value> args) {
                           return std::vector<Value>{body.Add(args[0], args[1])};
                         })[0];
  context.CheckNotViolated(
      any(b.Compare(total, context.Constant(0.0, c10::kFloat, {rows}),
                    FunctionBuilder::ComparisonDirection::kLe)),
      context.op_name() + ": invalid multinomial distribution (sum of probabilities <= 0)");
  const int64_t draws = replacement ? samples : 1;
  std::vector<int64_t> noisy_dims = {rows, draws, categories};
  Value u = Uniform01(context, c10::kFloat, noisy_dims);
  // Gumbel noise -log(-log(u)); u == 0 gives -inf, which never wins.
  Value gumbel = b.Negate(b.Log(b.Negate(b.Log(u))));
  Value logits = b.BroadcastInDim(b.Log(p), noisy_dims, {0, 2});
  Value keys = b.Add(logits, gumbel);
  Value index = b.Iota(TensorType{ElementType::kS64, noisy_dims}, 2);
  auto sorted = b.Sort(
      {keys, index}, 2, /*is_stable=*/true, [](FunctionBuilder& body, std::span<const Value> args) {
        return std::vector<Value>{
            body.Compare(args[0], args[1], FunctionBuilder::ComparisonDirection::kGt, true)};
      });
  // With replacement: the winner of each draw; without: the first `samples` of the one draw.
  std::vector<int64_t> limit = {rows, draws, replacement ? 1 : samples};
  Value chosen = b.Slice(sorted[1], {0, 0, 0}, limit, {1, 1, 1});
  std::vector<int64_t> out_dims = {rows, samples};
  if (self.value.rank() == 1) out_dims = {samples};
  return {b.Reshape(chosen, out_dims)};
}
TORCH_TPU_LOWERING(Multinomial, "aten::multinomial", "aten::multinomial.out");

// bernoulli.p(self, float p, *, Generator?) and bernoulli.Tensor(self, Tensor p, *, Generator?)
std::vector<Value> BernoulliWithProbability(LoweringContext& context,
                                            std::span<const Operand> operands) {
  const Operand& self = operands[0];
  const auto& dims = self.value.dims();
  auto& builder = context.builder();
  Value u = Uniform01(context, c10::kFloat, dims);
  Value p;
  if (operands[1].kind == Operand::Kind::kStatic) {
    const double probability = context.Double(operands[1]);
    TORCH_CHECK(probability >= 0 && probability <= 1, context.op_name(),
                ": bernoulli_ expects p to be in [0, 1], but got p=", probability);
    p = context.Constant(probability, c10::kFloat, dims);
  } else {
    p = context.BroadcastTo(context.Convert(operands[1].value, c10::kFloat), dims);
  }
  Value hit = builder.Compare(u, p, FunctionBuilder::ComparisonDirection::kLt);
  return {context.Convert(hit, self.dtype)};
}
TORCH_TPU_LOWERING(BernoulliWithProbability, "aten::bernoulli.p", "aten::bernoulli_.float");
TORCH_TPU_LOWERING(BernoulliWithProbability, "aten::bernoulli.Tensor", "aten::bernoulli_.Tensor");

// bernoulli(self, *, Generator?): self holds the probabilities.
std::vector<Value> Bernoulli(LoweringContext& context, std::span<const Operand> operands) {
  CheckFloating(context, operands[0].dtype);
  const auto& dims = operands[0].value.dims();
  Value u = Uniform01(context, c10::kFloat, dims);
  Value hit = context.builder().Compare(u, context.Convert(operands[0].value, c10::kFloat),
                                        FunctionBuilder::ComparisonDirection::kLt);
  return {context.Convert(hit, operands[0].dtype)};
}
TORCH_TPU_LOWERING(Bernoulli, "aten::bernoulli", "aten::bernoulli.out");

// rrelu_with_noise in training (the host kernel, aten/rrelu_kernels.cc, writes `noise`):
// (self, Scalar lower, Scalar upper) -> (output, noise). Each element x <= 0 is scaled by its own
// slope drawn uniformly from [lower, upper), which noise records; noise is 1 elsewhere (NaN too).
std::vector<Value> RreluWithNoise(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  CheckKernelDtype(context, c10::isFloatingType(self.dtype), "rrelu_with_noise_out_cpu",
                   self.dtype);
  auto& b = context.builder();
  const auto& dims = self.value.dims();
  const c10::ScalarType compute = ComputeDtype(self.dtype);
  Value lower = context.BroadcastTo(context.Convert(operands[1].value, compute), dims);
  Value upper = context.BroadcastTo(context.Convert(operands[2].value, compute), dims);
  Value slope =
      b.Add(lower, b.Multiply(Uniform01(context, compute, dims), b.Subtract(upper, lower)));
  Value x = context.Convert(self.value, compute);
  Value scaled = b.Compare(x, context.Constant(0.0, compute, dims), Direction::kLe);
  Value output = b.Select(scaled, b.Multiply(x, slope), x);
  Value noise = b.Select(scaled, slope, context.Constant(1.0, compute, dims));
  return {context.Convert(output, self.dtype), context.Convert(noise, self.dtype)};
}
TORCH_TPU_LOWERING(RreluWithNoise, "torch_tpu::rrelu_with_noise");

// Integers drawn uniformly from [low, low + range), then converted to the tensor's dtype.
Value RandomInRange(LoweringContext& context, c10::ScalarType dtype,
                    const std::vector<int64_t>& dims, int64_t low, uint64_t range) {
  auto& builder = context.builder();
  Value bits = RandomBits(context, ElementType::kU64, dims);
  Value offset = builder.Remainder(bits, builder.ConstantUnsigned(ElementType::kU64, range, dims));
  Value value = builder.Add(builder.Convert(offset, ElementType::kS64),
                            builder.ConstantInt(ElementType::kS64, low, dims));
  return context.Convert(value, dtype);
}

// The largest value random_() draws for a dtype (PyTorch: 2^mantissa for floats).
int64_t DefaultRandomBound(c10::ScalarType dtype) {
  if (c10::isFloatingType(dtype)) return (int64_t{1} << MantissaDigits(dtype)) + 1;
  switch (dtype) {
    case c10::kBool:
      return 2;
    case c10::kByte:
      return 256;
    case c10::kChar:
      return 128;
    case c10::kShort:
      return 32768;
    case c10::kInt:
      return int64_t{1} << 31;
    default:
      return std::numeric_limits<int64_t>::max();
  }
}

// random.from(self, int from, int? to, *, Generator?), random.to(self, int to, ...), random(self)
std::vector<Value> Random(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  int64_t from = 0;
  std::optional<int64_t> to;
  if (operands.size() == 3) {
    from = context.Int(operands[1]);
    if (!operands[2].is_none()) to = context.Int(operands[2]);
  } else if (operands.size() == 2) {
    to = context.Int(operands[1]);
  }
  const uint64_t range = to ? static_cast<uint64_t>(*to - from)
                            : static_cast<uint64_t>(DefaultRandomBound(self.dtype) - from);
  TORCH_CHECK(!to || from < *to, context.op_name(),
              ": random_ expects 'from' to be less than 'to', but got from=", from, " >= to=", *to);
  return {RandomInRange(context, self.dtype, self.value.dims(), from, range)};
}
TORCH_TPU_LOWERING(Random, "aten::random.from", "aten::random_.from");
TORCH_TPU_LOWERING(Random, "aten::random.to", "aten::random_.to");
TORCH_TPU_LOWERING(Random, "aten::random", "aten::random_");

// exponential(self, float lambd=1, *, Generator?): -log(1 - u) / lambda
std::vector<Value> Exponential(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  CheckFloating(context, self.dtype);
  const double lambda = context.Double(operands[1]);
  TORCH_CHECK(lambda > 0, context.op_name(),
              ": exponential_ expects lambda > 0.0, but found lambda=", lambda);
  const auto& dims = self.value.dims();
  auto& builder = context.builder();
  const c10::ScalarType compute = ComputeDtype(self.dtype);
  Value u = Uniform01(context, self.dtype, dims);
  Value sample =
      builder.Divide(builder.Negate(builder.Log1p(builder.Negate(context.Convert(u, compute)))),
                     context.Constant(lambda, compute, dims));
  return {context.Convert(sample, self.dtype)};
}
TORCH_TPU_LOWERING(Exponential, "aten::exponential", "aten::exponential_");

// cauchy(self, float median=0, float sigma=1), log_normal(self, float mean=1, float std=2),
// geometric(self, float p): inverse-CDF transforms of uniform samples.
template <int kKind>
std::vector<Value> InverseCdf(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  const auto& dims = self.value.dims();
  auto& b = context.builder();
  // geometric also fills integer tensors: it samples in float and converts the whole numbers.
  const c10::ScalarType uniform_dtype = c10::isFloatingType(self.dtype) ? self.dtype : c10::kFloat;
  const c10::ScalarType compute = ComputeDtype(uniform_dtype);
  Value u = context.Convert(Uniform01(context, uniform_dtype, dims), compute);
  auto constant = [&](double value) { return context.Constant(value, compute, dims); };
  Value sample;
  if (kKind == 0) {
    CheckFloating(context, self.dtype);
    sample = b.Add(constant(context.Double(operands[1])),
                   b.Multiply(constant(context.Double(operands[2])),
                              b.Tan(b.Multiply(constant(M_PI), b.Subtract(u, constant(0.5))))));
  } else if (kKind == 1) {
    CheckFloating(context, self.dtype);
    Value normal = Normal(context, std::vector<Operand>{self, operands[1], operands[2]})[0];
    sample = b.Exp(context.Convert(normal, compute));
  } else {
    const double p = context.Double(operands[1]);
    TORCH_CHECK(p > 0 && p < 1, context.op_name(),
                ": geometric_ expects p to be in (0, 1), got p=", p);
    sample = b.Ceil(b.Divide(b.Log1p(b.Negate(u)), constant(std::log1p(-p))));
    sample = b.Maximum(sample, constant(1.0));
  }
  return {context.Convert(sample, self.dtype)};
}
TORCH_TPU_LOWERING(InverseCdf<0>, "aten::cauchy", "aten::cauchy_");
TORCH_TPU_LOWERING(InverseCdf<1>, "aten::log_normal", "aten::log_normal_");
TORCH_TPU_LOWERING(InverseCdf<2>, "aten::geometric", "aten::geometric_");

}  // namespace

}  // namespace torch_tpu::lowering
