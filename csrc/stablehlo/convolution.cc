// stablehlo.convolution with inferred result dims (and element type unless one is asked for).
#include <string>
#include <utility>

#include "builder.h"
#include "builder_internal.h"

namespace torch_tpu::stablehlo {

using internal::Fail;
using internal::I64Array;

namespace {

// "[b, f, 0, 1]": the role of each dimension of one operand, in dimension order.
std::string Layout(int64_t rank, int64_t first, const char* first_name, int64_t second,
                   const char* second_name, const std::vector<int64_t>& spatial) {
  std::vector<std::string> roles(static_cast<size_t>(rank), "?");
  if (first >= 0 && first < rank) roles[first] = first_name;
  if (second >= 0 && second < rank) roles[second] = second_name;
  for (size_t i = 0; i < spatial.size(); ++i) {
    if (spatial[i] >= 0 && spatial[i] < rank) roles[spatial[i]] = std::to_string(i);
  }
  std::string text = "[";
  for (size_t i = 0; i < roles.size(); ++i) text += (i ? ", " : "") + roles[i];
  return text + "]";
}

}  // namespace

Value FunctionBuilder::Convolution(Value lhs, Value rhs, const ConvolutionDimensions& d,
                                   std::vector<int64_t> window_strides,
                                   std::vector<std::pair<int64_t, int64_t>> padding,
                                   std::vector<int64_t> lhs_dilation,
                                   std::vector<int64_t> rhs_dilation, int64_t feature_group_count,
                                   int64_t batch_group_count, Precision precision,
                                   std::optional<ElementType> result_type) {
  constexpr std::string_view kOp = "stablehlo.convolution";
  const TensorType& l = Check(lhs, kOp).type;
  const TensorType& r = Check(rhs, kOp).type;
  const size_t spatial = d.input_spatial.size();
  const std::string context = " (lhs " + l.ToString() + ", rhs " + r.ToString() + ")";
  if (l.element_type != r.element_type) Fail(kOp, "element types differ" + context);
  if (d.kernel_spatial.size() != spatial || d.output_spatial.size() != spatial ||
      l.rank() != static_cast<int64_t>(spatial) + 2 || r.rank() != l.rank()) {
    Fail(kOp, "operand ranks and spatial dimension counts disagree" + context);
  }
  if (window_strides.empty()) window_strides.assign(spatial, 1);
  if (lhs_dilation.empty()) lhs_dilation.assign(spatial, 1);
  if (rhs_dilation.empty()) rhs_dilation.assign(spatial, 1);
  if (padding.empty()) padding.assign(spatial, {0, 0});
  if (window_strides.size() != spatial || lhs_dilation.size() != spatial ||
      rhs_dilation.size() != spatial || padding.size() != spatial) {
    Fail(kOp, "strides, dilations and padding need one entry per spatial dimension" + context);
  }
  const int64_t batch = l.dims[d.input_batch];
  const int64_t features = l.dims[d.input_feature];
  const int64_t kernel_in = r.dims[d.kernel_input_feature];
  const int64_t kernel_out = r.dims[d.kernel_output_feature];
  if (feature_group_count < 1 || batch_group_count < 1 ||
      (feature_group_count > 1 && batch_group_count > 1)) {
    Fail(kOp, "invalid group counts" + context);
  }
  if (features % feature_group_count != 0 || features / feature_group_count != kernel_in) {
    Fail(kOp, "input features " + std::to_string(features) + " / feature_group_count " +
                  std::to_string(feature_group_count) + " must equal kernel input features " +
                  std::to_string(kernel_in) + context);
  }
  if (kernel_out % feature_group_count != 0 || kernel_out % batch_group_count != 0 ||
      batch % batch_group_count != 0) {
    Fail(kOp, "group counts must divide the batch and kernel output features" + context);
  }
  std::vector<int64_t> dims(static_cast<size_t>(l.rank()), 0);
  dims[d.output_batch] = batch / batch_group_count;
  dims[d.output_feature] = kernel_out;
  for (size_t i = 0; i < spatial; ++i) {
    if (window_strides[i] < 1 || lhs_dilation[i] < 1 || rhs_dilation[i] < 1) {
      Fail(kOp, "strides and dilations must be positive" + context);
    }
    const int64_t input = l.dims[d.input_spatial[i]];
    const int64_t kernel = r.dims[d.kernel_spatial[i]];
    const int64_t dilated_input = input == 0 ? 0 : (input - 1) * lhs_dilation[i] + 1;
    const int64_t padded = dilated_input + padding[i].first + padding[i].second;
    const int64_t dilated_kernel = kernel == 0 ? 0 : (kernel - 1) * rhs_dilation[i] + 1;
    dims[d.output_spatial[i]] =
        padded < dilated_kernel ? 0 : (padded - dilated_kernel) / window_strides[i] + 1;
  }
  std::string padding_text = "dense<[";
  for (size_t i = 0; i < spatial; ++i) {
    padding_text += (i ? ", [" : "[") + std::to_string(padding[i].first) + ", " +
                    std::to_string(padding[i].second) + "]";
  }
  padding_text += "]> : tensor<" + std::to_string(spatial) + "x2xi64>";
  std::string attributes =
      "batch_group_count = " + std::to_string(batch_group_count) +
      " : i64, dimension_numbers = #stablehlo.conv<" +
      Layout(l.rank(), d.input_batch, "b", d.input_feature, "f", d.input_spatial) + "x" +
      Layout(r.rank(), d.kernel_output_feature, "o", d.kernel_input_feature, "i", d.kernel_spatial) +
      "->" + Layout(l.rank(), d.output_batch, "b", d.output_feature, "f", d.output_spatial) +
      ">, feature_group_count = " + std::to_string(feature_group_count) +
      " : i64, lhs_dilation = " + I64Array(lhs_dilation) + ", padding = " + padding_text +
      ", rhs_dilation = " + I64Array(rhs_dilation) + ", window_strides = " +
      I64Array(window_strides);
  // Always spelled out, DEFAULT too, as dot_general's.
  const char* name = precision == Precision::kHighest ? "HIGHEST"
                     : precision == Precision::kHigh  ? "HIGH"
                                                      : "DEFAULT";
  attributes += std::string(", precision_config = [#stablehlo<precision ") + name +
                ">, #stablehlo<precision " + name + ">]";
  return EmitOne(kOp, {lhs, rhs}, attributes,
                 TensorType{result_type.value_or(l.element_type), std::move(dims)});
}

}  // namespace torch_tpu::stablehlo
