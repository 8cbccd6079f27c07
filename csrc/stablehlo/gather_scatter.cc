// Gather and scatter ops of FunctionBuilder, plus the 1-D convenience forms used to read and write
// arbitrary (strided) views of a flat buffer.
#include <algorithm>
#include <utility>

#include "builder.h"
#include "builder_internal.h"

namespace torch_tpu::stablehlo {

using internal::Fail;
using internal::I64Array;
using internal::OperandTypes;
using internal::Scalar;
using internal::TypeList;

namespace {

// Appends "name = [a, b]" to a #stablehlo.gather/scatter body; empty lists are left out, as the
// dialect's own printer does (the parser defaults missing fields to empty).
void AddField(std::string& numbers, std::string_view name, const std::vector<int64_t>& values) {
  if (values.empty()) return;
  if (!numbers.empty()) numbers += ", ";
  numbers += std::string(name) + " = " + DimsToString(values);
}

// Checks a dimension-number list: entries within [0, bound), distinct, and ascending if `sorted`.
void CheckField(std::string_view op, std::string_view name, const std::vector<int64_t>& values,
                int64_t bound, bool sorted, const std::string& context) {
  std::string prefix = std::string(name) + " " + DimsToString(values);
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] < 0 || values[i] >= bound) {
      Fail(op, prefix + " has dimension " + std::to_string(values[i]) + " out of range [0, " +
                   std::to_string(bound) + ")" + context);
    }
    for (size_t j = 0; j < i; ++j) {
      if (values[j] == values[i]) {
        Fail(op, prefix + " repeats dimension " + std::to_string(values[i]) + context);
      }
    }
    if (sorted && i > 0 && values[i - 1] > values[i]) {
      Fail(op, prefix + " must be sorted" + context);
    }
  }
}

// No dimension may appear in both lists.
void CheckDisjoint(std::string_view op, std::string_view a_name, const std::vector<int64_t>& a,
                   std::string_view b_name, const std::vector<int64_t>& b,
                   const std::string& context) {
  for (int64_t d : a) {
    if (std::find(b.begin(), b.end(), d) != b.end()) {
      Fail(op, "dimension " + std::to_string(d) + " is in both " + std::string(a_name) + " and " +
                   std::string(b_name) + context);
    }
  }
}

// The index-related dimension numbers of gather or scatter, with their spec names.
struct IndexSpec {
  std::string_view operand_batching_name, indices_batching_name, index_map_name;
  const std::vector<int64_t>& operand_batching;
  const std::vector<int64_t>& indices_batching;
  const std::vector<int64_t>& index_map;
  int64_t index_vector_dim;
};

// Validation shared by gather and scatter: the index tensor, index_vector_dim, the batching dims
// of both sides and the index map. Returns the index tensor's dims without index_vector_dim.
std::vector<int64_t> CheckIndices(std::string_view op, const TensorType& operand,
                                  const TensorType& indices, const IndexSpec& spec,
                                  const std::string& context) {
  if (!IsInteger(indices.element_type)) {
    Fail(op, "indices " + indices.ToString() + " must have an integer element type" + context);
  }
  int64_t ivd = spec.index_vector_dim;
  if (ivd < 0 || ivd > indices.rank()) {
    Fail(op, "index_vector_dim " + std::to_string(ivd) + " is out of range [0, " +
                 std::to_string(indices.rank()) + "]" + context);
  }
  CheckField(op, spec.index_map_name, spec.index_map, operand.rank(), false, context);
  CheckField(op, spec.operand_batching_name, spec.operand_batching, operand.rank(), true,
             context);
  CheckDisjoint(op, spec.index_map_name, spec.index_map, spec.operand_batching_name,
                spec.operand_batching, context);
  CheckField(op, spec.indices_batching_name, spec.indices_batching, indices.rank(), false,
             context);
  if (std::find(spec.indices_batching.begin(), spec.indices_batching.end(), ivd) !=
      spec.indices_batching.end()) {
    Fail(op, std::string(spec.indices_batching_name) + " must not contain index_vector_dim" +
                 context);
  }
  int64_t index_vector_size = ivd < indices.rank() ? indices.dims[ivd] : 1;
  if (static_cast<int64_t>(spec.index_map.size()) != index_vector_size) {
    Fail(op, std::string(spec.index_map_name) + " " + DimsToString(spec.index_map) + " needs " +
                 std::to_string(index_vector_size) +
                 " entries (the size of the index vector)" + context);
  }
  if (spec.operand_batching.size() != spec.indices_batching.size()) {
    Fail(op, std::string(spec.operand_batching_name) + " and " +
                 std::string(spec.indices_batching_name) + " differ in length" + context);
  }
  for (size_t i = 0; i < spec.operand_batching.size(); ++i) {
    if (operand.dims[spec.operand_batching[i]] != indices.dims[spec.indices_batching[i]]) {
      Fail(op, "batching dimension sizes differ between operand and indices" + context);
    }
  }
  std::vector<int64_t> batch;
  for (int64_t i = 0; i < indices.rank(); ++i) {
    if (i != ivd) batch.push_back(indices.dims[i]);
  }
  return batch;
}

}  // namespace

// ---- Gather ------------------------------------------------------------------------------------

Value FunctionBuilder::Gather(Value operand, Value start_indices, const GatherDimensions& d,
                              std::vector<int64_t> slice_sizes, bool indices_are_sorted) {
  constexpr std::string_view kOp = "stablehlo.gather";
  CheckOpen(kOp);
  const TensorType& x = Check(operand, kOp).type;
  const TensorType& idx = Check(start_indices, kOp).type;

  std::string numbers;
  AddField(numbers, "offset_dims", d.offset_dims);
  AddField(numbers, "collapsed_slice_dims", d.collapsed_slice_dims);
  AddField(numbers, "operand_batching_dims", d.operand_batching_dims);
  AddField(numbers, "start_indices_batching_dims", d.start_indices_batching_dims);
  AddField(numbers, "start_index_map", d.start_index_map);
  if (!numbers.empty()) numbers += ", ";
  numbers += "index_vector_dim = " + std::to_string(d.index_vector_dim);
  std::string context = " (operand " + x.ToString() + ", start_indices " + idx.ToString() +
                        ", dimension numbers <" + numbers + ">, slice_sizes " +
                        DimsToString(slice_sizes) + ")";

  std::vector<int64_t> batch = CheckIndices(
      kOp, x, idx,
      {"operand_batching_dims", "start_indices_batching_dims", "start_index_map",
       d.operand_batching_dims, d.start_indices_batching_dims, d.start_index_map,
       d.index_vector_dim},
      context);
  if (static_cast<int64_t>(slice_sizes.size()) != x.rank()) {
    Fail(kOp, "slice_sizes needs one entry per operand dimension" + context);
  }
  for (size_t i = 0; i < slice_sizes.size(); ++i) {
    if (slice_sizes[i] < 0 || slice_sizes[i] > x.dims[i]) {
      Fail(kOp, "slice size " + std::to_string(slice_sizes[i]) + " of dimension " +
                    std::to_string(i) + " is out of bounds" + context);
    }
  }
  if (static_cast<int64_t>(d.offset_dims.size() + d.collapsed_slice_dims.size() +
                           d.operand_batching_dims.size()) != x.rank()) {
    Fail(kOp, "offset_dims, collapsed_slice_dims and operand_batching_dims must together have "
              "one entry per operand dimension" + context);
  }
  CheckField(kOp, "collapsed_slice_dims", d.collapsed_slice_dims, x.rank(), true, context);
  CheckDisjoint(kOp, "collapsed_slice_dims", d.collapsed_slice_dims, "operand_batching_dims",
                d.operand_batching_dims, context);
  for (const auto* list : {&d.collapsed_slice_dims, &d.operand_batching_dims}) {
    for (int64_t dim : *list) {
      if (slice_sizes[dim] > 1) {
        Fail(kOp, "collapsed and batching dimension " + std::to_string(dim) +
                      " must have slice size 0 or 1" + context);
      }
    }
  }
  std::vector<int64_t> offset_sizes;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (std::find(d.collapsed_slice_dims.begin(), d.collapsed_slice_dims.end(), i) ==
            d.collapsed_slice_dims.end() &&
        std::find(d.operand_batching_dims.begin(), d.operand_batching_dims.end(), i) ==
            d.operand_batching_dims.end()) {
      offset_sizes.push_back(slice_sizes[i]);
    }
  }
  auto result_rank = static_cast<int64_t>(batch.size() + offset_sizes.size());
  CheckField(kOp, "offset_dims", d.offset_dims, result_rank, true, context);

  std::vector<int64_t> dims;
  size_t next_batch = 0, next_offset = 0;
  for (int64_t i = 0; i < result_rank; ++i) {
    bool is_offset = std::find(d.offset_dims.begin(), d.offset_dims.end(), i) !=
                     d.offset_dims.end();
    dims.push_back(is_offset ? offset_sizes[next_offset++] : batch[next_batch++]);
  }
  std::string attributes = "dimension_numbers = #stablehlo.gather<" + numbers +
                           ">, slice_sizes = " + I64Array(slice_sizes) +
                           ", indices_are_sorted = " + (indices_are_sorted ? "true" : "false");
  return EmitOne(kOp, {operand, start_indices}, attributes,
                 TensorType{x.element_type, std::move(dims)});
}

Value FunctionBuilder::Gather1D(Value operand, Value indices) {
  constexpr std::string_view kOp = "stablehlo.gather";
  CheckOpen(kOp);
  const TensorType& x = Check(operand, kOp).type;
  const TensorType& idx = Check(indices, kOp).type;
  std::string context = " (operand " + x.ToString() + ", indices " + idx.ToString() + ")";
  if (x.rank() != 1) Fail(kOp, "Gather1D needs a rank-1 operand" + context);
  if (!IsInteger(idx.element_type)) {
    Fail(kOp, "Gather1D needs integer indices" + context);
  }
  if (x.dims[0] == 0) {
    // A slice of size 1 does not fit an empty operand; an empty view of it needs no gather.
    if (idx.NumElements() != 0) Fail(kOp, "cannot gather from an empty operand" + context);
    return Constant(x.element_type, 0, idx.dims);
  }
  GatherDimensions d;
  d.collapsed_slice_dims = {0};
  d.start_index_map = {0};
  d.index_vector_dim = idx.rank();
  return Gather(operand, indices, d, {1});
}

// ---- Scatter -----------------------------------------------------------------------------------

std::vector<Value> FunctionBuilder::Scatter(std::vector<Value> inputs, Value scatter_indices,
                                            std::vector<Value> updates,
                                            const ScatterDimensions& d, const RegionBody& body,
                                            bool indices_are_sorted, bool unique_indices) {
  constexpr std::string_view kOp = "stablehlo.scatter";
  CheckOpen(kOp);
  for (const Value& v : inputs) Check(v, kOp);
  const TensorType& idx = Check(scatter_indices, kOp).type;
  for (const Value& v : updates) Check(v, kOp);

  std::string numbers;
  AddField(numbers, "update_window_dims", d.update_window_dims);
  AddField(numbers, "inserted_window_dims", d.inserted_window_dims);
  AddField(numbers, "input_batching_dims", d.input_batching_dims);
  AddField(numbers, "scatter_indices_batching_dims", d.scatter_indices_batching_dims);
  AddField(numbers, "scatter_dims_to_operand_dims", d.scatter_dims_to_operand_dims);
  if (!numbers.empty()) numbers += ", ";
  numbers += "index_vector_dim = " + std::to_string(d.index_vector_dim);
  std::string context = " (inputs " + OperandTypes(inputs) + "; scatter_indices " +
                        idx.ToString() + "; updates " + OperandTypes(updates) +
                        "; dimension numbers <" + numbers + ">)";

  if (inputs.empty()) Fail(kOp, "needs at least one input" + context);
  if (inputs.size() != updates.size()) Fail(kOp, "needs one update per input" + context);
  const TensorType& x = inputs[0].type();
  const TensorType& u = updates[0].type();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dims() != x.dims) Fail(kOp, "input shapes differ" + context);
    if (updates[i].dims() != u.dims) Fail(kOp, "update shapes differ" + context);
    if (updates[i].element_type() != inputs[i].element_type()) {
      Fail(kOp, "update " + std::to_string(i) + " must have the element type of its input" +
                    context);
    }
  }
  std::vector<int64_t> scatter_sizes = CheckIndices(
      kOp, x, idx,
      {"input_batching_dims", "scatter_indices_batching_dims", "scatter_dims_to_operand_dims",
       d.input_batching_dims, d.scatter_indices_batching_dims, d.scatter_dims_to_operand_dims,
       d.index_vector_dim},
      context);
  if (static_cast<int64_t>(d.update_window_dims.size() + d.inserted_window_dims.size() +
                           d.input_batching_dims.size()) != x.rank()) {
    Fail(kOp, "update_window_dims, inserted_window_dims and input_batching_dims must together "
              "have one entry per input dimension" + context);
  }
  CheckField(kOp, "inserted_window_dims", d.inserted_window_dims, x.rank(), true, context);
  CheckDisjoint(kOp, "inserted_window_dims", d.inserted_window_dims, "input_batching_dims",
                d.input_batching_dims, context);
  CheckField(kOp, "update_window_dims", d.update_window_dims, u.rank(), true, context);
  if (static_cast<int64_t>(scatter_sizes.size() + d.update_window_dims.size()) != u.rank()) {
    Fail(kOp, "updates must have rank " +
                  std::to_string(scatter_sizes.size() + d.update_window_dims.size()) +
                  " (scatter dims plus update_window_dims)" + context);
  }
  // Window dims of the input, in order, bound the update window sizes.
  std::vector<int64_t> window_bounds;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (std::find(d.inserted_window_dims.begin(), d.inserted_window_dims.end(), i) ==
            d.inserted_window_dims.end() &&
        std::find(d.input_batching_dims.begin(), d.input_batching_dims.end(), i) ==
            d.input_batching_dims.end()) {
      window_bounds.push_back(x.dims[i]);
    }
  }
  size_t next_scatter = 0, next_window = 0;
  for (int64_t i = 0; i < u.rank(); ++i) {
    bool is_window = std::find(d.update_window_dims.begin(), d.update_window_dims.end(), i) !=
                     d.update_window_dims.end();
    if (is_window) {
      if (u.dims[i] > window_bounds[next_window++]) {
        Fail(kOp, "update window dimension " + std::to_string(i) +
                      " is larger than the matching input dimension" + context);
      }
    } else if (u.dims[i] != scatter_sizes[next_scatter++]) {
      Fail(kOp, "update scatter dimension " + std::to_string(i) +
                    " must match the indices' batch dimensions " + DimsToString(scatter_sizes) +
                    context);
    }
  }

  std::vector<TensorType> scalars;
  for (const Value& v : inputs) scalars.push_back(Scalar(v.element_type()));
  std::vector<TensorType> region_args = scalars;
  region_args.insert(region_args.end(), scalars.begin(), scalars.end());
  size_t n = inputs.size();
  RegionBody replace = [n](FunctionBuilder&, std::span<const Value> args) {
    return std::vector<Value>(args.begin() + static_cast<std::ptrdiff_t>(n), args.end());
  };
  Region region = BuildRegion(kOp, region_args, body ? body : replace);
  if (region.result_types != scalars) {
    Fail(kOp, "region body returned (" + TypeList(region.result_types) + ") but must return (" +
                  TypeList(scalars) + ")");
  }

  std::vector<TensorType> results;
  for (const Value& v : inputs) results.push_back(v.type());
  std::vector<Value> operands = inputs;
  operands.push_back(scatter_indices);
  operands.insert(operands.end(), updates.begin(), updates.end());
  std::string attributes = "scatter_dimension_numbers = #stablehlo.scatter<" + numbers +
                           ">, indices_are_sorted = " + (indices_are_sorted ? "true" : "false") +
                           ", unique_indices = " + (unique_indices ? "true" : "false");
  return Emit(kOp, operands, attributes, std::move(results), &region);
}

Value FunctionBuilder::Scatter1D(Value operand, Value indices, Value updates) {
  constexpr std::string_view kOp = "stablehlo.scatter";
  CheckOpen(kOp);
  const TensorType& x = Check(operand, kOp).type;
  const TensorType& idx = Check(indices, kOp).type;
  const TensorType& u = Check(updates, kOp).type;
  std::string context = " (operand " + x.ToString() + ", indices " + idx.ToString() +
                        ", updates " + u.ToString() + ")";
  if (x.rank() != 1) Fail(kOp, "Scatter1D needs a rank-1 operand" + context);
  if (!IsInteger(idx.element_type)) Fail(kOp, "Scatter1D needs integer indices" + context);
  if (u.element_type != x.element_type || u.dims != idx.dims) {
    Fail(kOp, "Scatter1D needs updates with the operand's element type and the indices' dims" +
                  context);
  }
  ScatterDimensions d;
  d.inserted_window_dims = {0};
  d.scatter_dims_to_operand_dims = {0};
  d.index_vector_dim = idx.rank();
  return Scatter({operand}, indices, {updates}, d, nullptr)[0];
}

}  // namespace torch_tpu::stablehlo
