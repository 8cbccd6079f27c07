// nn.TransformerEncoder's inference fast path with a src_key_padding_mask on tpu. PyTorch packs
// the batch into a nested tensor (aten::_nested_tensor_from_mask, after
// aten::_nested_tensor_from_mask_left_aligned when mask_check is on), runs every layer's
// aten::_transformer_encoder_layer_fwd on the nested tensor and pads the result back
// (aten::to_padded_tensor). A nested tpu tensor holds its values in one dense tpu buffer, so
// these kernels move rows between the packed buffer and a padded [N, T, ...] tensor with one
// index_select each, from row indices computed on the host (the nested layout, the sequence
// lengths, lives on the host anyway), and run the layer as the dense tpu kernel with a key
// padding mask. No value goes through a CPU kernel: the only host work is reading the mask to
// know the lengths, as CPU does. Argument checks and messages are CPU's.
#include <ATen/ATen.h>
#include <ATen/NestedTensorImpl.h>
#include <ATen/native/nested/NestedTensorUtils.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace torch_tpu::aten {
namespace {

// A host int64 tensor of `values` copied to `device`.
at::Tensor IndexOn(const std::vector<int64_t>& values, at::Device device) {
  at::Tensor host = at::empty({static_cast<int64_t>(values.size())}, at::kLong);
  std::copy(values.begin(), values.end(), host.data_ptr<int64_t>());
  return host.to(device);
}

// CPU's checks of _nested_tensor_from_mask(_left_aligned), in its order and words, then the
// per-row count of true positions (the sequence lengths) and whether every row is left-aligned:
// CPU compares the count with the index of the first false position.
struct MaskRows {
  std::vector<int64_t> lengths;
  bool left_aligned = true;
};

MaskRows ReadMask(const at::Tensor& t, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Expected mask to be of ScalarType Bool, but got ",
              mask.scalar_type(), " instead.");
  TORCH_CHECK(mask.dim() == 2, "Padding mask should be 2D");
  TORCH_CHECK(t.dim() == 3, "Input should be a 3D tensor, N * L * D");
  const int64_t n = t.size(0);
  const int64_t length = t.size(1);
  TORCH_CHECK(n == mask.size(0) && length == mask.size(1), "Mask size should match input size");
  // The lengths are the nested layout, which lives on the host: one read of the mask, as on
  // CPU and CUDA.
  const at::Tensor host = mask.to(at::kCPU).contiguous();
  const bool* data = host.const_data_ptr<bool>();
  MaskRows rows;
  rows.lengths.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    const bool* row = data + i * length;
    const int64_t count = std::count(row, row + length, true);
    const int64_t first_false = std::find(row, row + length, false) - row;
    rows.left_aligned = rows.left_aligned && count == first_false;
    rows.lengths.push_back(count);
  }
  return rows;
}

// The first lengths[i] rows of padded[i] (padded: [N, T, row...]), packed into one flat buffer.
at::Tensor PackRows(const at::Tensor& padded, const std::vector<int64_t>& lengths) {
  const int64_t n = padded.size(0);
  const int64_t t = padded.size(1);
  std::vector<int64_t> index;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t row = 0; row < lengths[i]; ++row) index.push_back(i * t + row);
  }
  std::vector<int64_t> rows_shape = {n * t};
  rows_shape.insert(rows_shape.end(), padded.sizes().begin() + 2, padded.sizes().end());
  return padded.reshape(rows_shape).index_select(0, IndexOn(index, padded.device())).reshape(-1);
}

// A contiguous nested tensor whose components share every size but the first ([len_i, row...]):
// the shape a transformer's sequences have. Its buffer is a stack of rows.
struct NestedRows {
  std::vector<int64_t> lengths;
  std::vector<int64_t> first_rows;  // each component's first row in the buffer
  std::vector<int64_t> row_shape;
  int64_t row_numel = 1;
};

std::optional<NestedRows> RowsOf(const at::native::NestedTensorImpl& nested) {
  const at::Tensor& sizes = nested.get_nested_sizes();
  if (sizes.dim() != 2 || sizes.size(1) == 0 || !at::native::nested_tensor_impl_is_contiguous(
                                                     &nested)) {
    return std::nullopt;
  }
  const int64_t n = sizes.size(0);
  const int64_t columns = sizes.size(1);
  const int64_t* data = sizes.const_data_ptr<int64_t>();
  const int64_t* offsets = nested.get_storage_offsets().const_data_ptr<int64_t>();
  NestedRows rows;
  if (n > 0) rows.row_shape.assign(data + 1, data + columns);
  for (int64_t size : rows.row_shape) rows.row_numel *= size;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::equal(data + i * columns + 1, data + (i + 1) * columns, rows.row_shape.begin())) {
      return std::nullopt;
    }
    rows.lengths.push_back(data[i * columns]);
    rows.first_rows.push_back(rows.row_numel == 0 ? 0 : offsets[i] / rows.row_numel);
  }
  return rows;
}

// The components padded with `padding` to [N, t, row...] (t >= every length): one index_select
// over the buffer's rows plus one padding row. With `key_padding`, also [N, t] true at padded
// positions (computed on the device from the row index, so nothing more is copied there).
at::Tensor PadRows(const at::Tensor& buffer, const NestedRows& rows, int64_t t, double padding,
                   at::Tensor* key_padding = nullptr) {
  const int64_t n = static_cast<int64_t>(rows.lengths.size());
  const int64_t buffer_rows = rows.row_numel == 0 ? 0 : buffer.numel() / rows.row_numel;
  std::vector<int64_t> rows_shape = {buffer_rows};
  rows_shape.insert(rows_shape.end(), rows.row_shape.begin(), rows.row_shape.end());
  const at::Tensor stacked = buffer.narrow(0, 0, buffer_rows * rows.row_numel).view(rows_shape);
  std::vector<int64_t> one_row = {0, 1};  // constant_pad_nd pads the last dim first
  std::vector<int64_t> pad(2 * rows.row_shape.size(), 0);
  pad.insert(pad.end(), one_row.begin(), one_row.end());
  const at::Tensor with_padding_row = at::constant_pad_nd(stacked, pad, padding);
  std::vector<int64_t> index;
  index.reserve(n * t);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t row = 0; row < t; ++row) {
      index.push_back(row < rows.lengths[i] ? rows.first_rows[i] + row : buffer_rows);
    }
  }
  at::Tensor device_index = IndexOn(index, buffer.device());
  std::vector<int64_t> padded_shape = {n, t};
  padded_shape.insert(padded_shape.end(), rows.row_shape.begin(), rows.row_shape.end());
  if (key_padding != nullptr) *key_padding = device_index.view({n, t}) == buffer_rows;
  return with_padding_row.index_select(0, device_index).view(padded_shape);
}

// CPU's pad_tensor_to_shape: pads the end of every dim.
at::Tensor PadToShape(const at::Tensor& tensor, at::IntArrayRef shape, double padding) {
  std::vector<int64_t> pad;
  bool needed = false;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    pad.push_back(0);
    pad.push_back(shape[d] - tensor.size(d));
    needed = needed || shape[d] != tensor.size(d);
  }
  return needed ? at::constant_pad_nd(tensor, pad, padding) : tensor;
}

at::Tensor NestedTensorFromMask(const at::Tensor& t, const at::Tensor& mask, bool mask_check) {
  const MaskRows rows = ReadMask(t, mask);
  TORCH_CHECK(!mask_check || rows.left_aligned, "Mask must be left-aligned without gaps");
  // Like CPU, row i keeps its first lengths[i] positions whether or not the mask is aligned.
  const int64_t n = t.size(0);
  at::Tensor sizes = at::empty({n, 2}, at::kLong);
  int64_t* data = sizes.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    data[2 * i] = rows.lengths[i];
    data[2 * i + 1] = t.size(2);
  }
  return at::native::wrap_buffer(PackRows(t, rows.lengths), sizes);
}

bool NestedTensorFromMaskLeftAligned(const at::Tensor& t, const at::Tensor& mask) {
  return ReadMask(t, mask).left_aligned;
}

at::Tensor NestedToPaddedTensor(const at::Tensor& self, double padding,
                                at::OptionalIntArrayRef output_size) {
  const at::native::NestedTensorImpl& nested = *at::native::get_nested_tensor_impl(self);
  TORCH_CHECK(at::native::nested_tensor_impl_is_contiguous(&nested),
              "for now to_padded_tensor only supports contiguous nested tensor");
  const std::vector<int64_t> max_size = at::native::NestedTensor_get_max_size(nested);
  const at::Tensor& sizes = nested.get_nested_sizes();
  if (sizes.numel() == 0 || sizes.dim() == 0) return nested.get_buffer().clone();
  TORCH_CHECK(self.numel() > 0,
              "to_padded_tensor: at least one constituent tensor should have non-zero numel");
  const int64_t n = sizes.size(0);
  std::vector<int64_t> shape = {n};
  shape.insert(shape.end(), max_size.begin(), max_size.end());
  if (output_size.has_value()) {
    TORCH_CHECK(output_size->size() == shape.size(),
                "Length of output_size does not match NestedTensor dims. Broadcasting is not "
                "supported.");
    for (size_t d = 0; d < shape.size(); ++d) {
      TORCH_CHECK((*output_size)[d] >= shape[d],
                  "Value in output_size is less than NestedTensor padded size. Truncation is "
                  "not supported.");
    }
  }
  const at::Tensor buffer = nested.get_buffer();
  at::Tensor padded;
  if (const std::optional<NestedRows> rows = RowsOf(nested)) {
    // Straight to the output's length when it is given, so only batch and row dims may be left.
    const int64_t t = output_size.has_value() ? (*output_size)[1] : shape[1];
    padded = PadRows(buffer, *rows, t, padding);
  } else {
    // Components ragged in more than their first dim: each padded to the largest, then stacked.
    std::vector<at::Tensor> components;
    const int64_t* data = sizes.const_data_ptr<int64_t>();
    const int64_t* offsets = nested.get_storage_offsets().const_data_ptr<int64_t>();
    const int64_t columns = sizes.size(1);
    for (int64_t i = 0; i < n; ++i) {
      const at::IntArrayRef size(data + i * columns, columns);
      const int64_t numel = c10::multiply_integers(size);
      components.push_back(
          PadToShape(buffer.narrow(0, offsets[i], numel).view(size), max_size, padding));
    }
    padded = at::stack(components);
  }
  return output_size.has_value() ? PadToShape(padded, *output_size, padding) : padded;
}

// The layer on nested input: its sequences padded to the longest, the same op on the padded
// tensor with a key padding mask over the padding (the dense tpu kernel, so no sequence sees
// another's padding), then packed back; padded rows never reach the result. Boxed, so the call
// is the op's own with src, mask and mask_type replaced.
void NestedTransformerEncoderLayer(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const auto argument = [&](const char* name) -> c10::IValue& {
    return *(stack->end() - schema.arguments().size() + *schema.argumentIndexWithName(name));
  };
  const at::Tensor src = argument("src").toTensor();
  const at::native::NestedTensorImpl& nested = *at::native::get_nested_tensor_impl(src);
  const at::Tensor buffer = nested.get_buffer();
  if (buffer.numel() == 0) {
    torch::jit::drop(*stack, schema.arguments().size());
    torch::jit::push(*stack, at::detail::make_tensor<at::native::NestedTensorImpl>(
                                 buffer, nested.get_nested_sizes()));
    return;
  }
  TORCH_CHECK(argument("mask").isNone(), "NestedTensor with mask is not supported yet");
  TORCH_CHECK(src.dim() == 3, "expected 3-D `query`, got ", src.dim(), "-D tensor");
  const std::optional<NestedRows> rows = RowsOf(nested);
  TORCH_CHECK(rows.has_value(), schema.name(), ": the nested input on ", src.device(),
              " must be contiguous with one last dim in every sequence");
  const int64_t longest = *std::max_element(rows->lengths.begin(), rows->lengths.end());
  at::Tensor key_padding;
  argument("src") = PadRows(buffer, *rows, longest, 0.0, &key_padding);
  argument("mask") = key_padding;
  argument("mask_type") = int64_t{1};
  op.callBoxed(stack);
  const at::Tensor output = torch::jit::pop(*stack).toTensor();
  torch::jit::push(*stack, at::native::wrap_buffer(PackRows(output, rows->lengths),
                                                   nested.get_nested_sizes().clone()));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_nested_tensor_from_mask", NestedTensorFromMask);
  m.impl("_nested_tensor_from_mask_left_aligned", NestedTensorFromMaskLeftAligned);
}

TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m) {
  m.impl("to_padded_tensor", NestedToPaddedTensor);
  m.impl("_transformer_encoder_layer_fwd",
         torch::CppFunction::makeFromBoxedFunction<&NestedTransformerEncoderLayer>());
}

}  // namespace
}  // namespace torch_tpu::aten
