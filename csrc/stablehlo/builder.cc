// Core of FunctionBuilder: value bookkeeping, text emission, constants and elementwise ops.
#include "builder.h"

#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "builder_internal.h"
#include "literal.h"

namespace torch_tpu::stablehlo {
namespace internal {
namespace {

bool IsAllowed(ElementType type, int allowed) {
  if (IsPred(type)) return allowed & kPredOk;
  if (IsSignedInteger(type)) return allowed & kSignedOk;
  if (IsUnsignedInteger(type)) return allowed & kUnsignedOk;
  if (IsComplex(type)) return allowed & kComplexOk;
  return allowed & kFloatOk;
}

std::string DescribeAllowed(int allowed) {
  std::vector<std::string> parts;
  if (allowed & kPredOk) parts.push_back("pred");
  if ((allowed & kIntOk) == kIntOk) {
    parts.push_back("integer");
  } else if (allowed & kSignedOk) {
    parts.push_back("signed integer");
  } else if (allowed & kUnsignedOk) {
    parts.push_back("unsigned integer");
  }
  if (allowed & kFloatOk) parts.push_back("floating-point");
  if (allowed & kComplexOk) parts.push_back("complex");
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += i + 1 == parts.size() ? " or " : ", ";
    out += parts[i];
  }
  return out;
}

}  // namespace

[[noreturn]] void Fail(std::string_view op, const std::string& what) {
  throw BuilderError(std::string(op) + ": " + what);
}

void CheckElementType(std::string_view op, const TensorType& type, int allowed) {
  if (!IsAllowed(type.element_type, allowed)) {
    Fail(op, "operand type " + type.ToString() + " has an unsupported element type; expected " +
                 DescribeAllowed(allowed));
  }
}

void CheckDims(std::string_view op, const std::vector<int64_t>& dims, std::string_view what) {
  for (int64_t d : dims) {
    if (d < 0) Fail(op, std::string(what) + " " + DimsToString(dims) + " has a negative size");
  }
}

void CheckDimensionList(std::string_view op, const std::vector<int64_t>& dims, int64_t rank,
                        std::string_view what, const TensorType& type) {
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t d : dims) {
    if (d < 0 || d >= rank) {
      Fail(op, std::string(what) + " " + DimsToString(dims) + " has dimension " +
                   std::to_string(d) + " out of range for operand type " + type.ToString());
    }
    if (seen[d]) {
      Fail(op, std::string(what) + " " + DimsToString(dims) + " repeats dimension " +
                   std::to_string(d) + " (operand type " + type.ToString() + ")");
    }
    seen[d] = true;
  }
}

std::string I64Array(const std::vector<int64_t>& values) {
  if (values.empty()) return "array<i64>";
  std::string out = "array<i64: ";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(values[i]);
  }
  out += '>';
  return out;
}

std::string TypeList(const std::vector<TensorType>& types) {
  std::string out;
  for (size_t i = 0; i < types.size(); ++i) {
    if (i) out += ", ";
    out += types[i].ToString();
  }
  return out;
}

std::string ResultTypeList(const std::vector<TensorType>& types) {
  if (types.size() == 1) return types[0].ToString();
  return "(" + TypeList(types) + ")";
}

std::string OperandTypes(const std::vector<Value>& values) {
  std::vector<TensorType> types;
  for (const Value& v : values) types.push_back(v.type());
  return TypeList(types);
}

TensorType Scalar(ElementType type) { return TensorType{type, {}}; }

}  // namespace internal

using internal::CheckDims;
using internal::CheckElementType;
using internal::Fail;
using internal::kAnyOk;
using internal::kComplexOk;
using internal::kFloatOk;
using internal::kInexactOk;
using internal::kIntOk;
using internal::kNumericOk;
using internal::kPredOk;
using internal::kSignedOk;
using internal::kUnsignedOk;
using internal::OperandTypes;
using internal::ResultTypeList;
using internal::TypeList;

namespace {

// Nested "[[a, b], [c, d]]" rendering of row-major elements.
void AppendNested(const std::vector<int64_t>& dims, const std::vector<std::string>& elements,
                  size_t dim, size_t& next, std::string& out) {
  if (dim == dims.size()) {
    out += elements[next++];
    return;
  }
  out += '[';
  for (int64_t i = 0; i < dims[dim]; ++i) {
    if (i) out += ", ";
    AppendNested(dims, elements, dim + 1, next, out);
  }
  out += ']';
}

std::string DenseLiteral(const TensorType& type, const std::vector<std::string>& elements) {
  if (type.NumElements() == 0) return "";
  size_t next = 0;
  std::string out;
  AppendNested(type.dims, elements, 0, next, out);
  return out;
}

std::string_view DirectionName(FunctionBuilder::ComparisonDirection direction) {
  using D = FunctionBuilder::ComparisonDirection;
  switch (direction) {
    case D::kEq:
      return "EQ";
    case D::kNe:
      return "NE";
    case D::kLt:
      return "LT";
    case D::kLe:
      return "LE";
    case D::kGt:
      return "GT";
    case D::kGe:
      return "GE";
  }
  throw BuilderError("stablehlo.compare: invalid comparison direction");
}

}  // namespace

const TensorType& Value::type() const {
  if (type_ == nullptr) {
    throw BuilderError("Value::type: the Value is invalid (default-constructed)");
  }
  return *type_;
}

FunctionBuilder::FunctionBuilder() : FunctionBuilder(Kind::kFunction, nullptr) {}

namespace {
std::atomic<uint64_t> next_builder_serial{1};
}  // namespace

FunctionBuilder::FunctionBuilder(Kind kind, std::shared_ptr<int64_t> counter)
    : kind_(kind),
      serial_(next_builder_serial.fetch_add(1, std::memory_order_relaxed)),
      counter_(counter ? std::move(counter) : std::make_shared<int64_t>(0)) {}

FunctionBuilder::~FunctionBuilder() = default;

const FunctionBuilder::ValueInfo& FunctionBuilder::Check(const Value& value,
                                                         std::string_view op) const {
  if (!value.valid()) Fail(op, "operand is an invalid (default-constructed) Value");
  // The message must not touch the value's type: its builder may already be gone.
  if (value.owner_ != this || value.serial_ != serial_ || value.id_ < 0 ||
      static_cast<size_t>(value.id_) >= values_.size()) {
    Fail(op,
         "operand belongs to a different builder (region bodies cannot use values of the "
         "enclosing function, and values cannot move between functions)");
  }
  return values_[value.id_];
}

void FunctionBuilder::CheckOpen(std::string_view op) const {
  if (returned_) Fail(op, "the function already has its Return; no ops can follow it");
}

Value FunctionBuilder::NewValue(std::string name, TensorType type) {
  values_.push_back(ValueInfo{std::move(name), std::move(type)});
  return Value(this, serial_, static_cast<int>(values_.size() - 1), &values_.back().type);
}

std::string FunctionBuilder::NextName() { return std::to_string((*counter_)++); }

std::vector<Value> FunctionBuilder::Emit(std::string_view op, const std::vector<Value>& operands,
                                         const std::string& attributes,
                                         std::vector<TensorType> result_types,
                                         const Region* region) {
  std::vector<const Region*> regions;
  if (region != nullptr) regions.push_back(region);
  return Emit(op, operands, attributes, std::move(result_types), regions);
}

std::vector<Value> FunctionBuilder::Emit(std::string_view op, const std::vector<Value>& operands,
                                         const std::string& attributes,
                                         std::vector<TensorType> result_types,
                                         const std::vector<const Region*>& regions) {
  CheckOpen(op);
  std::string id = NextName();
  std::string text;
  if (!result_types.empty()) {
    text = "%" + id;
    if (result_types.size() > 1) text += ":" + std::to_string(result_types.size());
    text += " = ";
  }
  text += "\"" + std::string(op) + "\"(";
  for (size_t i = 0; i < operands.size(); ++i) {
    if (i) text += ", ";
    text += values_[operands[i].id_].name;
  }
  text += ")";
  for (size_t r = 0; r < regions.size(); ++r) {
    text += r == 0 ? " ({" : ", {";
    lines_.push_back({0, std::move(text)});
    for (const Line& line : regions[r]->lines) lines_.push_back(line);
    text = r + 1 == regions.size() ? "})" : "}";
  }
  if (!attributes.empty()) text += " {" + attributes + "}";
  text += " : (" + OperandTypes(operands) + ") -> " + ResultTypeList(result_types);
  lines_.push_back({0, std::move(text)});

  std::vector<int> operand_ids;
  operand_ids.reserve(operands.size());
  for (const Value& operand : operands) operand_ids.push_back(operand.id_);
  std::vector<Value> results;
  for (size_t i = 0; i < result_types.size(); ++i) {
    std::string name = "%" + id;
    if (result_types.size() > 1) name += "#" + std::to_string(i);
    results.push_back(NewValue(std::move(name), std::move(result_types[i])));
    values_.back().operands = operand_ids;
  }
  return results;
}

Value FunctionBuilder::EmitOne(std::string_view op, const std::vector<Value>& operands,
                               const std::string& attributes, TensorType result_type) {
  return Emit(op, operands, attributes, {std::move(result_type)})[0];
}

FunctionBuilder::Region FunctionBuilder::BuildRegion(std::string_view op,
                                                     const std::vector<TensorType>& argument_types,
                                                     const RegionBody& body) {
  CheckOpen(op);
  if (!body) Fail(op, "region body callback is empty");
  FunctionBuilder nested(Kind::kRegion, counter_);
  std::string header = "^bb0(";
  for (size_t i = 0; i < argument_types.size(); ++i) {
    std::string name = "%b" + NextName();
    if (i) header += ", ";
    header += name + ": " + argument_types[i].ToString();
    nested.region_arguments_.push_back(nested.NewValue(name, argument_types[i]));
  }
  header += "):";
  std::vector<Value> results = body(nested, nested.region_arguments_);
  if (nested.returned_) {
    Fail(op, "the region body callback must return its results instead of calling Return");
  }
  nested.Return(std::move(results));
  Region region;
  region.lines.push_back({0, std::move(header)});
  for (Line& line : nested.lines_) region.lines.push_back({line.indent + 1, std::move(line.text)});
  region.result_types = nested.result_types_;
  return region;
}

Value FunctionBuilder::Argument(TensorType type) {
  CheckOpen("Argument");
  if (kind_ != Kind::kFunction) {
    Fail("Argument", "region builders get their arguments from the enclosing op");
  }
  CheckDims("Argument", type.dims, "argument dims");
  std::string name = "%arg" + std::to_string(argument_types_.size());
  argument_types_.push_back(type);
  argument_aliases_.push_back(-1);
  Value value = NewValue(std::move(name), std::move(type));
  argument_value_ids_.push_back(value.id_);
  return value;
}

// ---- Constants ---------------------------------------------------------------------------------

Value FunctionBuilder::EmitConstant(TensorType type, std::string literal) {
  std::string attributes = "value = dense<" + literal + "> : " + type.ToString();
  return EmitOne("stablehlo.constant", {}, attributes, std::move(type));
}

Value FunctionBuilder::Constant(ElementType type, double value, std::vector<int64_t> dims) {
  constexpr std::string_view kOp = "stablehlo.constant";
  CheckOpen(kOp);
  CheckDims(kOp, dims, "dims");
  TensorType tensor{type, std::move(dims)};
  std::string literal = tensor.NumElements() == 0 ? "" : internal::FormatElement(type, value, kOp);
  return EmitConstant(std::move(tensor), std::move(literal));
}

Value FunctionBuilder::ConstantInt(ElementType type, int64_t value, std::vector<int64_t> dims) {
  constexpr std::string_view kOp = "stablehlo.constant";
  CheckOpen(kOp);
  CheckDims(kOp, dims, "dims");
  TensorType tensor{type, std::move(dims)};
  std::string literal = tensor.NumElements() == 0 ? "" : internal::FormatElement(type, value, kOp);
  return EmitConstant(std::move(tensor), std::move(literal));
}

Value FunctionBuilder::ConstantUnsigned(ElementType type, uint64_t value,
                                        std::vector<int64_t> dims) {
  constexpr std::string_view kOp = "stablehlo.constant";
  CheckOpen(kOp);
  CheckDims(kOp, dims, "dims");
  TensorType tensor{type, std::move(dims)};
  std::string literal =
      tensor.NumElements() == 0 ? "" : internal::FormatUnsignedElement(type, value, kOp);
  return EmitConstant(std::move(tensor), std::move(literal));
}

Value FunctionBuilder::ConstantDense(TensorType type, std::span<const double> values) {
  constexpr std::string_view kOp = "stablehlo.constant";
  CheckOpen(kOp);
  CheckDims(kOp, type.dims, "dims");
  if (static_cast<int64_t>(values.size()) != type.NumElements()) {
    Fail(kOp, std::to_string(values.size()) + " values given for type " + type.ToString());
  }
  std::vector<std::string> elements;
  for (double v : values) elements.push_back(internal::FormatElement(type.element_type, v, kOp));
  std::string literal = DenseLiteral(type, elements);
  return EmitConstant(std::move(type), std::move(literal));
}

Value FunctionBuilder::ConstantDenseInt(TensorType type, std::span<const int64_t> values) {
  constexpr std::string_view kOp = "stablehlo.constant";
  CheckOpen(kOp);
  CheckDims(kOp, type.dims, "dims");
  if (static_cast<int64_t>(values.size()) != type.NumElements()) {
    Fail(kOp, std::to_string(values.size()) + " values given for type " + type.ToString());
  }
  std::vector<std::string> elements;
  for (int64_t v : values) elements.push_back(internal::FormatElement(type.element_type, v, kOp));
  std::string literal = DenseLiteral(type, elements);
  return EmitConstant(std::move(type), std::move(literal));
}

Value FunctionBuilder::Iota(TensorType type, int64_t iota_dimension) {
  constexpr std::string_view kOp = "stablehlo.iota";
  CheckOpen(kOp);
  CheckDims(kOp, type.dims, "dims");
  CheckElementType(kOp, type, kNumericOk);
  if (iota_dimension < 0 || iota_dimension >= type.rank()) {
    Fail(kOp, "iota_dimension " + std::to_string(iota_dimension) + " is out of range for " +
                  type.ToString());
  }
  return EmitOne(kOp, {}, "iota_dimension = " + std::to_string(iota_dimension) + " : i64",
                 std::move(type));
}

// ---- Elementwise -------------------------------------------------------------------------------

Value FunctionBuilder::Binary(std::string_view op, Value lhs, Value rhs, int allowed) {
  const TensorType& l = Check(lhs, op).type;
  const TensorType& r = Check(rhs, op).type;
  if (l != r) {
    Fail(op, "operand types " + l.ToString() + " and " + r.ToString() +
                 " differ (the builder never broadcasts or promotes implicitly)");
  }
  CheckElementType(op, l, allowed);
  return EmitOne(op, {lhs, rhs}, "", l);
}

Value FunctionBuilder::Unary(std::string_view op, Value operand, int allowed) {
  const TensorType& type = Check(operand, op).type;
  CheckElementType(op, type, allowed);
  return EmitOne(op, {operand}, "", type);
}

Value FunctionBuilder::Add(Value l, Value r) { return Binary("stablehlo.add", l, r, kAnyOk | kComplexOk); }
Value FunctionBuilder::Subtract(Value l, Value r) {
  return Binary("stablehlo.subtract", l, r, kNumericOk | kComplexOk);
}
Value FunctionBuilder::Multiply(Value l, Value r) {
  return Binary("stablehlo.multiply", l, r, kAnyOk | kComplexOk);
}
Value FunctionBuilder::Divide(Value l, Value r) {
  return Binary("stablehlo.divide", l, r, kNumericOk | kComplexOk);
}
Value FunctionBuilder::Remainder(Value l, Value r) {
  return Binary("stablehlo.remainder", l, r, kNumericOk);
}
Value FunctionBuilder::Maximum(Value l, Value r) {
  return Binary("stablehlo.maximum", l, r, kAnyOk);
}
Value FunctionBuilder::Minimum(Value l, Value r) {
  return Binary("stablehlo.minimum", l, r, kAnyOk);
}
Value FunctionBuilder::Power(Value l, Value r) {
  return Binary("stablehlo.power", l, r, kNumericOk | kComplexOk);
}
Value FunctionBuilder::Atan2(Value l, Value r) { return Binary("stablehlo.atan2", l, r, kFloatOk); }
Value FunctionBuilder::And(Value l, Value r) {
  return Binary("stablehlo.and", l, r, kPredOk | kIntOk);
}
Value FunctionBuilder::Or(Value l, Value r) {
  return Binary("stablehlo.or", l, r, kPredOk | kIntOk);
}
Value FunctionBuilder::Xor(Value l, Value r) {
  return Binary("stablehlo.xor", l, r, kPredOk | kIntOk);
}
Value FunctionBuilder::ShiftLeft(Value l, Value r) {
  return Binary("stablehlo.shift_left", l, r, kIntOk);
}
Value FunctionBuilder::ShiftRightArithmetic(Value l, Value r) {
  return Binary("stablehlo.shift_right_arithmetic", l, r, kIntOk);
}
Value FunctionBuilder::ShiftRightLogical(Value l, Value r) {
  return Binary("stablehlo.shift_right_logical", l, r, kIntOk);
}

Value FunctionBuilder::Negate(Value v) { return Unary("stablehlo.negate", v, kNumericOk | kComplexOk); }
Value FunctionBuilder::Abs(Value v) {
  constexpr std::string_view kOp = "stablehlo.abs";
  const TensorType& type = Check(v, kOp).type;
  CheckElementType(kOp, type, kSignedOk | kInexactOk);
  // The modulus of a complex number is real.
  const ElementType result =
      IsComplex(type.element_type) ? ComplexPartType(type.element_type) : type.element_type;
  return EmitOne(kOp, {v}, "", TensorType{result, type.dims});
}
Value FunctionBuilder::Exp(Value v) { return Unary("stablehlo.exponential", v, kInexactOk); }
Value FunctionBuilder::Expm1(Value v) {
  return Unary("stablehlo.exponential_minus_one", v, kInexactOk);
}
Value FunctionBuilder::Log(Value v) { return Unary("stablehlo.log", v, kInexactOk); }
Value FunctionBuilder::Log1p(Value v) { return Unary("stablehlo.log_plus_one", v, kInexactOk); }
Value FunctionBuilder::Sqrt(Value v) { return Unary("stablehlo.sqrt", v, kInexactOk); }
Value FunctionBuilder::Rsqrt(Value v) { return Unary("stablehlo.rsqrt", v, kInexactOk); }
Value FunctionBuilder::Cbrt(Value v) { return Unary("stablehlo.cbrt", v, kFloatOk); }
Value FunctionBuilder::Tanh(Value v) { return Unary("stablehlo.tanh", v, kInexactOk); }
Value FunctionBuilder::Logistic(Value v) { return Unary("stablehlo.logistic", v, kInexactOk); }
Value FunctionBuilder::Sine(Value v) { return Unary("stablehlo.sine", v, kInexactOk); }
Value FunctionBuilder::Cosine(Value v) { return Unary("stablehlo.cosine", v, kInexactOk); }
Value FunctionBuilder::Tan(Value v) { return Unary("stablehlo.tan", v, kInexactOk); }
Value FunctionBuilder::Floor(Value v) { return Unary("stablehlo.floor", v, kFloatOk); }
Value FunctionBuilder::Ceil(Value v) { return Unary("stablehlo.ceil", v, kFloatOk); }
Value FunctionBuilder::RoundNearestEven(Value v) {
  return Unary("stablehlo.round_nearest_even", v, kFloatOk);
}
Value FunctionBuilder::RoundNearestAfz(Value v) {
  return Unary("stablehlo.round_nearest_afz", v, kFloatOk);
}
Value FunctionBuilder::Sign(Value v) { return Unary("stablehlo.sign", v, kSignedOk | kInexactOk); }
Value FunctionBuilder::Not(Value v) { return Unary("stablehlo.not", v, kPredOk | kIntOk); }
Value FunctionBuilder::PopulationCount(Value v) { return Unary("stablehlo.popcnt", v, kIntOk); }
Value FunctionBuilder::CountLeadingZeros(Value v) {
  return Unary("stablehlo.count_leading_zeros", v, kIntOk);
}

Value FunctionBuilder::Erf(Value v) { return Unary("chlo.erf", v, kFloatOk); }
Value FunctionBuilder::ErfInv(Value v) { return Unary("chlo.erf_inv", v, kFloatOk); }
Value FunctionBuilder::Lgamma(Value v) { return Unary("chlo.lgamma", v, kFloatOk); }
Value FunctionBuilder::Digamma(Value v) { return Unary("chlo.digamma", v, kFloatOk); }
Value FunctionBuilder::Asin(Value v) { return Unary("chlo.asin", v, kInexactOk); }
Value FunctionBuilder::Acos(Value v) { return Unary("chlo.acos", v, kInexactOk); }
Value FunctionBuilder::Atan(Value v) { return Unary("chlo.atan", v, kInexactOk); }
Value FunctionBuilder::Sinh(Value v) { return Unary("chlo.sinh", v, kInexactOk); }
Value FunctionBuilder::Cosh(Value v) { return Unary("chlo.cosh", v, kInexactOk); }
Value FunctionBuilder::Asinh(Value v) { return Unary("chlo.asinh", v, kInexactOk); }
Value FunctionBuilder::Acosh(Value v) { return Unary("chlo.acosh", v, kInexactOk); }
Value FunctionBuilder::Atanh(Value v) { return Unary("chlo.atanh", v, kInexactOk); }

Value FunctionBuilder::IsFinite(Value v) {
  constexpr std::string_view kOp = "stablehlo.is_finite";
  const TensorType& type = Check(v, kOp).type;
  CheckElementType(kOp, type, kFloatOk);
  return EmitOne(kOp, {v}, "", TensorType{ElementType::kPred, type.dims});
}

Value FunctionBuilder::Clamp(Value min, Value operand, Value max) {
  constexpr std::string_view kOp = "stablehlo.clamp";
  const TensorType& lo = Check(min, kOp).type;
  const TensorType& x = Check(operand, kOp).type;
  const TensorType& hi = Check(max, kOp).type;
  std::string types =
      "(min " + lo.ToString() + ", operand " + x.ToString() + ", max " + hi.ToString() + ")";
  if (lo.element_type != x.element_type || hi.element_type != x.element_type) {
    Fail(kOp, "element types differ " + types);
  }
  if ((!lo.IsScalar() && lo.dims != x.dims) || (!hi.IsScalar() && hi.dims != x.dims)) {
    Fail(kOp, "min and max must be scalars or have the operand's shape " + types);
  }
  CheckElementType(kOp, x, kNumericOk);
  return EmitOne(kOp, {min, operand, max}, "", x);
}

Value FunctionBuilder::Compare(Value lhs, Value rhs, ComparisonDirection direction,
                               bool total_order) {
  constexpr std::string_view kOp = "stablehlo.compare";
  const TensorType& l = Check(lhs, kOp).type;
  const TensorType& r = Check(rhs, kOp).type;
  if (l != r) Fail(kOp, "operand types " + l.ToString() + " and " + r.ToString() + " differ");
  std::string_view compare_type;
  if (IsComplex(l.element_type)) {
    // Complex numbers have no order: only (in)equality is defined.
    if (direction != ComparisonDirection::kEq && direction != ComparisonDirection::kNe) {
      Fail(kOp, "complex operands " + l.ToString() + " only compare for EQ or NE");
    }
    if (total_order) Fail(kOp, "total order comparison requested for complex operands");
    compare_type = "FLOAT";
  } else if (IsFloat(l.element_type)) {
    compare_type = total_order ? "TOTALORDER" : "FLOAT";
  } else if (total_order) {
    Fail(kOp, "total order comparison requested for non-float operands " + l.ToString());
  } else if (IsSignedInteger(l.element_type)) {
    compare_type = "SIGNED";
  } else {
    compare_type = "UNSIGNED";  // unsigned integers and pred
  }
  std::string attributes = "comparison_direction = #stablehlo<comparison_direction " +
                           std::string(DirectionName(direction)) +
                           ">, compare_type = #stablehlo<comparison_type " +
                           std::string(compare_type) + ">";
  return EmitOne(kOp, {lhs, rhs}, attributes, TensorType{ElementType::kPred, l.dims});
}

Value FunctionBuilder::Select(Value pred, Value on_true, Value on_false) {
  constexpr std::string_view kOp = "stablehlo.select";
  const TensorType& p = Check(pred, kOp).type;
  const TensorType& t = Check(on_true, kOp).type;
  const TensorType& f = Check(on_false, kOp).type;
  std::string types =
      "(pred " + p.ToString() + ", on_true " + t.ToString() + ", on_false " + f.ToString() + ")";
  if (p.element_type != ElementType::kPred) Fail(kOp, "pred is not of element type i1 " + types);
  if (t != f) Fail(kOp, "on_true and on_false types differ " + types);
  if (!p.IsScalar() && p.dims != t.dims) {
    Fail(kOp, "pred must be a scalar or have the shape of on_true " + types);
  }
  return EmitOne(kOp, {pred, on_true, on_false}, "", t);
}

void FunctionBuilder::Return(std::vector<Value> results) {
  std::string_view op = kind_ == Kind::kFunction ? "func.return" : "stablehlo.return";
  if (returned_) Fail(op, "Return called twice");
  for (const Value& v : results) Check(v, op);
  for (const Value& v : results) returned_ids_.push_back(v.id_);
  std::string text = "\"" + std::string(op) + "\"(";
  for (size_t i = 0; i < results.size(); ++i) {
    if (i) text += ", ";
    text += values_[results[i].id_].name;
  }
  text += ") : (" + OperandTypes(results) + ") -> ()";
  lines_.push_back({0, std::move(text)});
  for (const Value& v : results) result_types_.push_back(v.type());
  returned_ = true;
}

std::vector<bool> FunctionBuilder::LiveArguments() const {
  if (!returned_) Fail("LiveArguments", "call after Return");
  std::vector<bool> live(values_.size(), false);
  std::vector<int> pending = returned_ids_;
  while (!pending.empty()) {
    const int id = pending.back();
    pending.pop_back();
    if (live[id]) continue;
    live[id] = true;
    for (int operand : values_[id].operands) pending.push_back(operand);
  }
  std::vector<bool> arguments;
  for (int id : argument_value_ids_) arguments.push_back(live[id]);
  return arguments;
}

void FunctionBuilder::AliasArgumentWithResult(int argument_index, int result_index) {
  if (argument_index < 0 || argument_index >= static_cast<int>(argument_types_.size())) {
    Fail("AliasArgumentWithResult", "no argument " + std::to_string(argument_index));
  }
  if (!returned_) Fail("AliasArgumentWithResult", "call after Return");
  if (result_index < 0 || result_index >= static_cast<int>(result_types_.size())) {
    Fail("AliasArgumentWithResult", "no result " + std::to_string(result_index));
  }
  if (!(argument_types_[argument_index] == result_types_[result_index])) {
    Fail("AliasArgumentWithResult", "argument type " + argument_types_[argument_index].ToString() +
                                        " differs from result type " +
                                        result_types_[result_index].ToString());
  }
  argument_aliases_[argument_index] = result_index;
}

std::string FunctionBuilder::FunctionText(std::string_view name, int indent) const {
  if (!returned_) {
    throw BuilderError("func.func @" + std::string(name) + ": Return has not been called");
  }
  std::string pad(static_cast<size_t>(indent), ' ');
  std::string out = pad + "func.func public @" + std::string(name) + "(";
  for (size_t i = 0; i < argument_types_.size(); ++i) {
    if (i) out += ", ";
    out += "%arg" + std::to_string(i) + ": " + argument_types_[i].ToString();
    // XLA reads this attribute as the input/output alias of the argument.
    if (argument_aliases_[i] >= 0) {
      out += " {tf.aliasing_output = " + std::to_string(argument_aliases_[i]) + " : i32}";
    }
  }
  out += ")";
  if (!result_types_.empty()) out += " -> (" + TypeList(result_types_) + ")";
  out += " {\n";
  for (const Line& line : lines_) {
    out += std::string(static_cast<size_t>(indent + 2 + 2 * line.indent), ' ');
    out += line.text;
    out += '\n';
  }
  out += pad + "}\n";
  return out;
}

}  // namespace torch_tpu::stablehlo
