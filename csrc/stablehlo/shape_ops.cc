// Conversion, shape manipulation and contraction ops of FunctionBuilder.
#include <algorithm>
#include <utility>

#include "builder.h"
#include "builder_internal.h"

namespace torch_tpu::stablehlo {

using internal::Fail;
using internal::CheckDims;
using internal::CheckDimensionList;
using internal::I64Array;
using internal::OperandTypes;

namespace {

std::string_view PrecisionName(FunctionBuilder::Precision precision) {
  using P = FunctionBuilder::Precision;
  switch (precision) {
    case P::kDefault: return "DEFAULT";
    case P::kHigh: return "HIGH";
    case P::kHighest: return "HIGHEST";
  }
  throw BuilderError("stablehlo.dot_general: invalid precision");
}

}  // namespace

// ---- Conversions and shapes --------------------------------------------------------------------

Value FunctionBuilder::Convert(Value operand, ElementType type) {
  constexpr std::string_view kOp = "stablehlo.convert";
  const TensorType& x = Check(operand, kOp).type;
  // XLA rejects complex -> real conversions: which part to keep is the caller's decision.
  if (IsComplex(x.element_type) && !IsComplex(type)) {
    Fail(kOp, "cannot convert " + x.ToString() + " to " + std::string(MlirName(type)) +
                  "; take its Real or Imag part first");
  }
  return EmitOne(kOp, {operand}, "", TensorType{type, x.dims});
}

Value FunctionBuilder::OptimizationBarrier(Value operand) {
  constexpr std::string_view kOp = "stablehlo.optimization_barrier";
  const TensorType type = Check(operand, kOp).type;
  return EmitOne(kOp, {operand}, "", type);
}

std::vector<Value> FunctionBuilder::OptimizationBarrier(const std::vector<Value>& operands) {
  constexpr std::string_view kOp = "stablehlo.optimization_barrier";
  std::vector<TensorType> types;
  types.reserve(operands.size());
  for (const Value& operand : operands) types.push_back(Check(operand, kOp).type);
  return Emit(kOp, operands, "", std::move(types));
}

Value FunctionBuilder::BitcastConvert(Value operand, ElementType type) {
  constexpr std::string_view kOp = "stablehlo.bitcast_convert";
  const TensorType& x = Check(operand, kOp).type;
  if (IsComplex(x.element_type) || IsComplex(type)) {
    Fail(kOp, "cannot reinterpret " + x.ToString() + " as " + std::string(MlirName(type)) +
                  ": complex types are not bitcast (split them into Real and Imag parts)");
  }
  int from = BitWidth(x.element_type);
  int to = BitWidth(type);
  if (from == to) return EmitOne(kOp, {operand}, "", TensorType{type, x.dims});
  std::string what = "cannot reinterpret " + x.ToString() + " as " + std::string(MlirName(type));
  if (IsPred(x.element_type) || IsPred(type)) {
    Fail(kOp, what + ": pred (i1) can only be bitcast to pred (element bit widths differ)");
  }
  std::vector<int64_t> dims = x.dims;
  if (from > to) {
    dims.push_back(from / to);
  } else {
    int64_t ratio = to / from;
    if (x.rank() == 0 || x.dims.back() != ratio) {
      Fail(kOp, what + ": widening needs a last operand dimension of size " +
                    std::to_string(ratio) + " (the element bit width ratio)");
    }
    dims.pop_back();
  }
  return EmitOne(kOp, {operand}, "", TensorType{type, std::move(dims)});
}

Value FunctionBuilder::BroadcastInDim(Value operand, std::vector<int64_t> result_dims,
                                      std::vector<int64_t> broadcast_dimensions) {
  constexpr std::string_view kOp = "stablehlo.broadcast_in_dim";
  const TensorType& x = Check(operand, kOp).type;
  CheckDims(kOp, result_dims, "result dims");
  std::string context = " (operand " + x.ToString() + ", result dims " +
                        DimsToString(result_dims) + ", broadcast_dimensions " +
                        DimsToString(broadcast_dimensions) + ")";
  if (static_cast<int64_t>(broadcast_dimensions.size()) != x.rank()) {
    Fail(kOp, "broadcast_dimensions needs one entry per operand dimension" + context);
  }
  std::vector<bool> seen(result_dims.size(), false);
  for (size_t i = 0; i < broadcast_dimensions.size(); ++i) {
    int64_t d = broadcast_dimensions[i];
    if (d < 0 || d >= static_cast<int64_t>(result_dims.size())) {
      Fail(kOp, "broadcast dimension " + std::to_string(d) + " is out of range" + context);
    }
    if (seen[d]) Fail(kOp, "broadcast dimension " + std::to_string(d) + " repeats" + context);
    seen[d] = true;
    if (x.dims[i] != 1 && x.dims[i] != result_dims[d]) {
      Fail(kOp, "operand dimension " + std::to_string(i) + " of size " +
                    std::to_string(x.dims[i]) + " must be 1 or equal result dimension " +
                    std::to_string(d) + " of size " + std::to_string(result_dims[d]) + context);
    }
  }
  std::string attributes = "broadcast_dimensions = " + I64Array(broadcast_dimensions);
  return EmitOne(kOp, {operand}, attributes, TensorType{x.element_type, std::move(result_dims)});
}

Value FunctionBuilder::Reshape(Value operand, std::vector<int64_t> dims) {
  constexpr std::string_view kOp = "stablehlo.reshape";
  const TensorType& x = Check(operand, kOp).type;
  CheckDims(kOp, dims, "result dims");
  TensorType result{x.element_type, std::move(dims)};
  if (result.NumElements() != x.NumElements()) {
    Fail(kOp, "cannot reshape " + x.ToString() + " to " + result.ToString() +
                  ": element counts differ");
  }
  return EmitOne(kOp, {operand}, "", std::move(result));
}

Value FunctionBuilder::Transpose(Value operand, std::vector<int64_t> permutation) {
  constexpr std::string_view kOp = "stablehlo.transpose";
  const TensorType& x = Check(operand, kOp).type;
  if (static_cast<int64_t>(permutation.size()) != x.rank()) {
    Fail(kOp, "permutation " + DimsToString(permutation) + " does not have one entry per "
              "dimension of " + x.ToString());
  }
  CheckDimensionList(kOp, permutation, x.rank(), "permutation", x);
  std::vector<int64_t> dims;
  for (int64_t p : permutation) dims.push_back(x.dims[p]);
  return EmitOne(kOp, {operand}, "permutation = " + I64Array(permutation),
                 TensorType{x.element_type, std::move(dims)});
}

Value FunctionBuilder::Slice(Value operand, std::vector<int64_t> start, std::vector<int64_t> limit,
                             std::vector<int64_t> strides) {
  constexpr std::string_view kOp = "stablehlo.slice";
  const TensorType& x = Check(operand, kOp).type;
  std::string context = " (operand " + x.ToString() + ", start " + DimsToString(start) +
                        ", limit " + DimsToString(limit) + ", strides " + DimsToString(strides) +
                        ")";
  auto rank = static_cast<size_t>(x.rank());
  if (start.size() != rank || limit.size() != rank || strides.size() != rank) {
    Fail(kOp, "start, limit and strides need one entry per operand dimension" + context);
  }
  std::vector<int64_t> dims;
  for (size_t i = 0; i < rank; ++i) {
    if (strides[i] <= 0) Fail(kOp, "strides must be positive" + context);
    if (start[i] < 0 || start[i] > limit[i] || limit[i] > x.dims[i]) {
      Fail(kOp, "dimension " + std::to_string(i) + " needs 0 <= start <= limit <= size" + context);
    }
    dims.push_back((limit[i] - start[i] + strides[i] - 1) / strides[i]);
  }
  std::string attributes = "start_indices = " + I64Array(start) +
                           ", limit_indices = " + I64Array(limit) +
                           ", strides = " + I64Array(strides);
  return EmitOne(kOp, {operand}, attributes, TensorType{x.element_type, std::move(dims)});
}

namespace {

// Start indices of dynamic_slice / dynamic_update_slice: integer scalars of one common type.
void CheckStartIndices(std::string_view op, const std::vector<Value>& indices,
                       const TensorType& operand) {
  if (static_cast<int64_t>(indices.size()) != operand.rank()) {
    Fail(op, std::to_string(indices.size()) + " start indices given for operand " +
                 operand.ToString());
  }
  for (const Value& index : indices) {
    const TensorType& t = index.type();
    if (!t.IsScalar() || !IsInteger(t.element_type)) {
      Fail(op, "start index of type " + t.ToString() + " is not an integer scalar");
    }
    if (t != indices[0].type()) {
      Fail(op, "start indices have different types " + indices[0].type().ToString() + " and " +
                   t.ToString());
    }
  }
}

}  // namespace

Value FunctionBuilder::DynamicSlice(Value operand, std::vector<Value> start_indices,
                                    std::vector<int64_t> slice_sizes) {
  constexpr std::string_view kOp = "stablehlo.dynamic_slice";
  const TensorType& x = Check(operand, kOp).type;
  for (const Value& v : start_indices) Check(v, kOp);
  CheckStartIndices(kOp, start_indices, x);
  if (static_cast<int64_t>(slice_sizes.size()) != x.rank()) {
    Fail(kOp, "slice_sizes " + DimsToString(slice_sizes) + " does not match operand " +
                  x.ToString());
  }
  for (size_t i = 0; i < slice_sizes.size(); ++i) {
    if (slice_sizes[i] < 0 || slice_sizes[i] > x.dims[i]) {
      Fail(kOp, "slice_sizes " + DimsToString(slice_sizes) + " out of bounds for operand " +
                    x.ToString());
    }
  }
  std::vector<Value> operands{operand};
  operands.insert(operands.end(), start_indices.begin(), start_indices.end());
  std::string attributes = "slice_sizes = " + I64Array(slice_sizes);
  return EmitOne(kOp, operands, attributes, TensorType{x.element_type, std::move(slice_sizes)});
}

Value FunctionBuilder::DynamicUpdateSlice(Value operand, Value update,
                                          std::vector<Value> start_indices) {
  constexpr std::string_view kOp = "stablehlo.dynamic_update_slice";
  const TensorType& x = Check(operand, kOp).type;
  const TensorType& u = Check(update, kOp).type;
  for (const Value& v : start_indices) Check(v, kOp);
  if (x.element_type != u.element_type || x.rank() != u.rank()) {
    Fail(kOp, "update " + u.ToString() + " must have the element type and rank of operand " +
                  x.ToString());
  }
  for (size_t i = 0; i < x.dims.size(); ++i) {
    if (u.dims[i] > x.dims[i]) {
      Fail(kOp, "update " + u.ToString() + " is larger than operand " + x.ToString());
    }
  }
  CheckStartIndices(kOp, start_indices, x);
  std::vector<Value> operands{operand, update};
  operands.insert(operands.end(), start_indices.begin(), start_indices.end());
  return EmitOne(kOp, operands, "", x);
}

Value FunctionBuilder::Concatenate(std::vector<Value> inputs, int64_t dimension) {
  constexpr std::string_view kOp = "stablehlo.concatenate";
  if (inputs.empty()) Fail(kOp, "needs at least one input");
  for (const Value& v : inputs) Check(v, kOp);
  const TensorType& first = inputs[0].type();
  if (dimension < 0 || dimension >= first.rank()) {
    Fail(kOp, "dimension " + std::to_string(dimension) + " is out of range for operand types (" +
                  OperandTypes(inputs) + ")");
  }
  std::vector<int64_t> dims = first.dims;
  dims[dimension] = 0;
  for (const Value& v : inputs) {
    const TensorType& t = v.type();
    bool compatible = t.element_type == first.element_type && t.rank() == first.rank();
    for (int64_t i = 0; compatible && i < t.rank(); ++i) {
      if (i != dimension && t.dims[i] != first.dims[i]) compatible = false;
    }
    if (!compatible) {
      Fail(kOp, "operand types (" + OperandTypes(inputs) + ") must agree in element type and in "
                "all dimensions except " + std::to_string(dimension));
    }
    dims[dimension] += t.dims[dimension];
  }
  return EmitOne(kOp, inputs, "dimension = " + std::to_string(dimension) + " : i64",
                 TensorType{first.element_type, std::move(dims)});
}

Value FunctionBuilder::Pad(Value operand, Value padding_value, std::vector<int64_t> low,
                           std::vector<int64_t> high, std::vector<int64_t> interior) {
  constexpr std::string_view kOp = "stablehlo.pad";
  const TensorType& x = Check(operand, kOp).type;
  const TensorType& p = Check(padding_value, kOp).type;
  std::string context = " (operand " + x.ToString() + ", padding value " + p.ToString() +
                        ", low " + DimsToString(low) + ", high " + DimsToString(high) +
                        ", interior " + DimsToString(interior) + ")";
  if (!p.IsScalar() || p.element_type != x.element_type) {
    Fail(kOp, "padding value must be a scalar of the operand's element type" + context);
  }
  auto rank = static_cast<size_t>(x.rank());
  if (low.size() != rank || high.size() != rank || interior.size() != rank) {
    Fail(kOp, "low, high and interior need one entry per operand dimension" + context);
  }
  std::vector<int64_t> dims;
  for (size_t i = 0; i < rank; ++i) {
    if (interior[i] < 0) Fail(kOp, "interior padding must be non-negative" + context);
    int64_t size = low[i] + high[i] + x.dims[i] + std::max<int64_t>(x.dims[i] - 1, 0) * interior[i];
    if (size < 0) Fail(kOp, "dimension " + std::to_string(i) + " would be negative" + context);
    dims.push_back(size);
  }
  std::string attributes = "edge_padding_low = " + I64Array(low) +
                           ", edge_padding_high = " + I64Array(high) +
                           ", interior_padding = " + I64Array(interior);
  return EmitOne(kOp, {operand, padding_value}, attributes,
                 TensorType{x.element_type, std::move(dims)});
}

Value FunctionBuilder::Reverse(Value operand, std::vector<int64_t> dimensions) {
  constexpr std::string_view kOp = "stablehlo.reverse";
  const TensorType& x = Check(operand, kOp).type;
  CheckDimensionList(kOp, dimensions, x.rank(), "dimensions", x);
  return EmitOne(kOp, {operand}, "dimensions = " + I64Array(dimensions), x);
}

Value FunctionBuilder::DotGeneral(Value lhs, Value rhs, const DotDimensions& dimensions,
                                  std::optional<ElementType> result_type, Precision precision) {
  constexpr std::string_view kOp = "stablehlo.dot_general";
  const TensorType& l = Check(lhs, kOp).type;
  const TensorType& r = Check(rhs, kOp).type;
  const DotDimensions& d = dimensions;
  std::string context = " (lhs " + l.ToString() + ", rhs " + r.ToString() + ", lhs_batch " +
                        DimsToString(d.lhs_batch) + ", rhs_batch " + DimsToString(d.rhs_batch) +
                        ", lhs_contracting " + DimsToString(d.lhs_contracting) +
                        ", rhs_contracting " + DimsToString(d.rhs_contracting) + ")";
  if (l.element_type != r.element_type) Fail(kOp, "element types differ" + context);
  if (d.lhs_batch.size() != d.rhs_batch.size()) {
    Fail(kOp, "lhs and rhs need the same number of batch dimensions" + context);
  }
  if (d.lhs_contracting.size() != d.rhs_contracting.size()) {
    Fail(kOp, "lhs and rhs need the same number of contracting dimensions" + context);
  }
  auto check_side = [&](const TensorType& t, const std::vector<int64_t>& batch,
                        const std::vector<int64_t>& contracting, std::string_view side) {
    std::vector<int64_t> all = batch;
    all.insert(all.end(), contracting.begin(), contracting.end());
    std::vector<bool> seen(static_cast<size_t>(t.rank()), false);
    for (int64_t dim : all) {
      if (dim < 0 || dim >= t.rank()) {
        Fail(kOp, std::string(side) + " dimension " + std::to_string(dim) + " is out of range" +
                      context);
      }
      if (seen[dim]) {
        Fail(kOp, std::string(side) + " dimension " + std::to_string(dim) +
                      " is used more than once" + context);
      }
      seen[dim] = true;
    }
    return seen;
  };
  std::vector<bool> lhs_used = check_side(l, d.lhs_batch, d.lhs_contracting, "lhs");
  std::vector<bool> rhs_used = check_side(r, d.rhs_batch, d.rhs_contracting, "rhs");
  std::vector<int64_t> dims;
  for (size_t i = 0; i < d.lhs_batch.size(); ++i) {
    if (l.dims[d.lhs_batch[i]] != r.dims[d.rhs_batch[i]]) {
      Fail(kOp, "batch dimension sizes differ" + context);
    }
    dims.push_back(l.dims[d.lhs_batch[i]]);
  }
  for (size_t i = 0; i < d.lhs_contracting.size(); ++i) {
    if (l.dims[d.lhs_contracting[i]] != r.dims[d.rhs_contracting[i]]) {
      Fail(kOp, "contracting dimension sizes differ" + context);
    }
  }
  for (int64_t i = 0; i < l.rank(); ++i) {
    if (!lhs_used[i]) dims.push_back(l.dims[i]);
  }
  for (int64_t i = 0; i < r.rank(); ++i) {
    if (!rhs_used[i]) dims.push_back(r.dims[i]);
  }
  // Empty lists are left out, as the dialect's own printer does.
  std::string numbers;
  auto add_field = [&](std::string_view name, const std::vector<int64_t>& values) {
    if (values.empty()) return;
    if (!numbers.empty()) numbers += ", ";
    numbers += std::string(name) + " = " + DimsToString(values);
  };
  add_field("lhs_batching_dimensions", d.lhs_batch);
  add_field("rhs_batching_dimensions", d.rhs_batch);
  add_field("lhs_contracting_dimensions", d.lhs_contracting);
  add_field("rhs_contracting_dimensions", d.rhs_contracting);
  std::string attributes = "dot_dimension_numbers = #stablehlo.dot<" + numbers + ">";
  // Always spelled out, DEFAULT too, so a program's text says what precision it was built with.
  const std::string p = "#stablehlo<precision " + std::string(PrecisionName(precision)) + ">";
  attributes += ", precision_config = [" + p + ", " + p + "]";
  return EmitOne(kOp, {lhs, rhs}, attributes,
                 TensorType{result_type.value_or(l.element_type), std::move(dims)});
}

}  // namespace torch_tpu::stablehlo
