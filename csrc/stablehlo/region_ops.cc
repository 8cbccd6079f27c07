// Ops of FunctionBuilder that carry regions (reduce, reduce_window, sort, while) and the RNG.
#include <algorithm>
#include <utility>

#include "builder.h"
#include "builder_internal.h"

namespace torch_tpu::stablehlo {

using internal::Fail;
using internal::CheckElementType;
using internal::CheckDims;
using internal::CheckDimensionList;
using internal::I64Array;
using internal::TypeList;
using internal::OperandTypes;
using internal::Scalar;
using internal::kNumericOk;

namespace {

std::string_view RngAlgorithmName(FunctionBuilder::RngAlgorithm algorithm) {
  using A = FunctionBuilder::RngAlgorithm;
  switch (algorithm) {
    case A::kDefault: return "DEFAULT";
    case A::kThreeFry: return "THREE_FRY";
    case A::kPhilox: return "PHILOX";
  }
  throw BuilderError("stablehlo.rng_bit_generator: invalid algorithm");
}

}  // namespace

// ---- Ops with regions --------------------------------------------------------------------------

namespace {

// Shared validation of reduce / reduce_window operands: N inputs with equal dims and N scalar
// init values of the matching element types.
void CheckReductionOperands(std::string_view op, const std::vector<Value>& inputs,
                            const std::vector<Value>& init_values) {
  if (inputs.empty()) Fail(op, "needs at least one input");
  std::string context = " (inputs " + OperandTypes(inputs) + "; init values " +
                        OperandTypes(init_values) + ")";
  if (inputs.size() != init_values.size()) {
    Fail(op, "needs one init value per input" + context);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dims() != inputs[0].dims()) Fail(op, "input shapes differ" + context);
    const TensorType& init = init_values[i].type();
    if (!init.IsScalar() || init.element_type != inputs[i].element_type()) {
      Fail(op, "init value " + std::to_string(i) +
                   " must be a scalar of its input's element type" + context);
    }
  }
}

// The body must yield exactly the accumulator types.
void CheckRegionResults(std::string_view op, const std::vector<TensorType>& got,
                        const std::vector<TensorType>& expected) {
  if (got != expected) {
    Fail(op, "region body returned (" + TypeList(got) + ") but must return (" +
                 TypeList(expected) + ")");
  }
}

}  // namespace

std::vector<Value> FunctionBuilder::Reduce(std::vector<Value> inputs,
                                           std::vector<Value> init_values,
                                           std::vector<int64_t> dimensions,
                                           const RegionBody& body) {
  constexpr std::string_view kOp = "stablehlo.reduce";
  CheckOpen(kOp);
  for (const Value& v : inputs) Check(v, kOp);
  for (const Value& v : init_values) Check(v, kOp);
  CheckReductionOperands(kOp, inputs, init_values);
  const TensorType& shape = inputs[0].type();
  CheckDimensionList(kOp, dimensions, shape.rank(), "dimensions", shape);

  std::vector<TensorType> accumulators;
  for (const Value& v : init_values) accumulators.push_back(v.type());
  std::vector<TensorType> region_args = accumulators;
  region_args.insert(region_args.end(), accumulators.begin(), accumulators.end());
  Region region = BuildRegion(kOp, region_args, body);
  CheckRegionResults(kOp, region.result_types, accumulators);

  std::vector<int64_t> dims;
  for (int64_t i = 0; i < shape.rank(); ++i) {
    if (std::find(dimensions.begin(), dimensions.end(), i) == dimensions.end()) {
      dims.push_back(shape.dims[i]);
    }
  }
  std::vector<TensorType> results;
  for (const TensorType& acc : accumulators) results.push_back({acc.element_type, dims});
  std::vector<Value> operands = inputs;
  operands.insert(operands.end(), init_values.begin(), init_values.end());
  return Emit(kOp, operands, "dimensions = " + I64Array(dimensions), std::move(results), &region);
}

std::vector<Value> FunctionBuilder::ReduceWindow(
    std::vector<Value> inputs, std::vector<Value> init_values,
    std::vector<int64_t> window_dimensions, std::vector<int64_t> window_strides,
    std::vector<int64_t> base_dilations, std::vector<int64_t> window_dilations,
    std::vector<std::pair<int64_t, int64_t>> padding, const RegionBody& body) {
  constexpr std::string_view kOp = "stablehlo.reduce_window";
  CheckOpen(kOp);
  for (const Value& v : inputs) Check(v, kOp);
  for (const Value& v : init_values) Check(v, kOp);
  CheckReductionOperands(kOp, inputs, init_values);
  const TensorType& shape = inputs[0].type();
  auto rank = static_cast<size_t>(shape.rank());
  if (window_strides.empty()) window_strides.assign(rank, 1);
  if (base_dilations.empty()) base_dilations.assign(rank, 1);
  if (window_dilations.empty()) window_dilations.assign(rank, 1);
  if (padding.empty()) padding.assign(rank, {0, 0});
  std::string context = " (input " + shape.ToString() + ", window " +
                        DimsToString(window_dimensions) + ", strides " +
                        DimsToString(window_strides) + ")";
  if (window_dimensions.size() != rank || window_strides.size() != rank ||
      base_dilations.size() != rank || window_dilations.size() != rank || padding.size() != rank) {
    Fail(kOp, "window attributes need one entry per input dimension" + context);
  }
  std::vector<int64_t> dims;
  for (size_t i = 0; i < rank; ++i) {
    if (window_dimensions[i] <= 0 || window_strides[i] <= 0 || base_dilations[i] <= 0 ||
        window_dilations[i] <= 0) {
      Fail(kOp, "window sizes, strides and dilations must be positive" + context);
    }
    int64_t dilated_input = shape.dims[i] == 0 ? 0 : (shape.dims[i] - 1) * base_dilations[i] + 1;
    int64_t padded = dilated_input + padding[i].first + padding[i].second;
    if (padded < 0) {
      Fail(kOp, "padding makes dimension " + std::to_string(i) + " negative" + context);
    }
    int64_t dilated_window = (window_dimensions[i] - 1) * window_dilations[i] + 1;
    dims.push_back(padded < dilated_window ? 0 : (padded - dilated_window) / window_strides[i] + 1);
  }

  std::vector<TensorType> accumulators;
  for (const Value& v : init_values) accumulators.push_back(v.type());
  std::vector<TensorType> region_args = accumulators;
  region_args.insert(region_args.end(), accumulators.begin(), accumulators.end());
  Region region = BuildRegion(kOp, region_args, body);
  CheckRegionResults(kOp, region.result_types, accumulators);

  std::string padding_text;
  for (size_t i = 0; i < rank; ++i) {
    if (i) padding_text += ", ";
    padding_text +=
        "[" + std::to_string(padding[i].first) + ", " + std::to_string(padding[i].second) + "]";
  }
  if (rank) padding_text = "[" + padding_text + "]";
  std::string attributes =
      "window_dimensions = " + I64Array(window_dimensions) +
      ", window_strides = " + I64Array(window_strides) +
      ", base_dilations = " + I64Array(base_dilations) +
      ", window_dilations = " + I64Array(window_dilations) + ", padding = dense<" + padding_text +
      "> : tensor<" + std::to_string(rank) + "x2xi64>";
  std::vector<TensorType> results;
  for (const TensorType& acc : accumulators) results.push_back({acc.element_type, dims});
  std::vector<Value> operands = inputs;
  operands.insert(operands.end(), init_values.begin(), init_values.end());
  return Emit(kOp, operands, attributes, std::move(results), &region);
}

std::vector<Value> FunctionBuilder::Sort(std::vector<Value> inputs, int64_t dimension,
                                         bool is_stable, const RegionBody& comparator) {
  constexpr std::string_view kOp = "stablehlo.sort";
  CheckOpen(kOp);
  if (inputs.empty()) Fail(kOp, "needs at least one input");
  for (const Value& v : inputs) Check(v, kOp);
  for (const Value& v : inputs) {
    if (v.dims() != inputs[0].dims()) {
      Fail(kOp, "input shapes differ (" + OperandTypes(inputs) + ")");
    }
  }
  int64_t rank = inputs[0].rank();
  if (dimension < 0 || dimension >= rank) {
    Fail(kOp, "dimension " + std::to_string(dimension) + " is out of range for (" +
                  OperandTypes(inputs) + ")");
  }
  std::vector<TensorType> region_args;
  for (const Value& v : inputs) {
    region_args.push_back(Scalar(v.element_type()));
    region_args.push_back(Scalar(v.element_type()));
  }
  Region region = BuildRegion(kOp, region_args, comparator);
  CheckRegionResults(kOp, region.result_types, {Scalar(ElementType::kPred)});
  std::vector<TensorType> results;
  for (const Value& v : inputs) results.push_back(v.type());
  std::string attributes = "dimension = " + std::to_string(dimension) +
                           " : i64, is_stable = " + (is_stable ? "true" : "false");
  return Emit(kOp, inputs, attributes, std::move(results), &region);
}

std::vector<Value> FunctionBuilder::While(std::vector<Value> initial,
                                          const RegionBody& condition, const RegionBody& body) {
  constexpr std::string_view kOp = "stablehlo.while";
  CheckOpen(kOp);
  if (initial.empty()) Fail(kOp, "needs at least one loop-carried value");
  std::vector<TensorType> carried;
  for (const Value& v : initial) carried.push_back(Check(v, kOp).type);
  Region condition_region = BuildRegion(kOp, carried, condition);
  CheckRegionResults(kOp, condition_region.result_types, {Scalar(ElementType::kPred)});
  Region body_region = BuildRegion(kOp, carried, body);
  CheckRegionResults(kOp, body_region.result_types, carried);
  return Emit(kOp, initial, "", carried, {&condition_region, &body_region});
}

std::pair<Value, Value> FunctionBuilder::RngBitGenerator(Value state, TensorType output,
                                                         RngAlgorithm algorithm) {
  constexpr std::string_view kOp = "stablehlo.rng_bit_generator";
  const TensorType& s = Check(state, kOp).type;
  CheckDims(kOp, output.dims, "output dims");
  std::string context = " (state " + s.ToString() + ", output " + output.ToString() + ")";
  // XLA's implementations all consume the state as u64 words.
  if (s.rank() != 1 || s.element_type != ElementType::kU64) {
    Fail(kOp, "state must be a rank-1 ui64 tensor" + context);
  }
  if (algorithm == RngAlgorithm::kThreeFry && s.dims[0] != 2) {
    Fail(kOp, "THREE_FRY needs a state of 2 elements" + context);
  }
  if (algorithm == RngAlgorithm::kPhilox && s.dims[0] != 2 && s.dims[0] != 3) {
    Fail(kOp, "PHILOX needs a state of 2 or 3 elements" + context);
  }
  CheckElementType(kOp, output, kNumericOk);
  std::string attributes =
      "rng_algorithm = #stablehlo<rng_algorithm " + std::string(RngAlgorithmName(algorithm)) + ">";
  std::vector<Value> results = Emit(kOp, {state}, attributes, {s, std::move(output)});
  return {results[0], results[1]};
}

}  // namespace torch_tpu::stablehlo
