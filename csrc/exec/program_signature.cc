#include "exec/program_signature.h"

#include <bit>
#include <cstring>
#include <sstream>

namespace torch_tpu::exec {
namespace {

enum class StaticKind : int64_t {
  kNone = 1,
  kBool,
  kInt,
  kDouble,
  kIntList,
  kDoubleList,
  kBoolList,
  kString,
  kDevice,
  kOther,
};

}  // namespace

void ProgramSignature::AddString(std::string_view text) {
  Add(static_cast<int64_t>(text.size()));
  for (size_t i = 0; i < text.size(); i += 8) {
    int64_t word = 0;
    std::memcpy(&word, text.data() + i, std::min<size_t>(8, text.size() - i));
    Add(word);
  }
}

void ProgramSignature::AddView(const at::Tensor& tensor) {
  AddView(tensor.scalar_type(), tensor.sizes(), tensor.strides(), tensor.storage_offset());
  AddViewBits(tensor);
}

void ProgramSignature::AddViewBits(const at::Tensor& tensor) {
  // A lazily conjugated or negated view reads different values from the same storage.
  Add(static_cast<int64_t>(tensor.is_conj()) | static_cast<int64_t>(tensor.is_neg()) << 1);
}

void ProgramSignature::AddView(c10::ScalarType dtype, c10::IntArrayRef sizes,
                               c10::IntArrayRef strides, int64_t storage_offset) {
  Add(static_cast<int64_t>(dtype));
  const auto rank = static_cast<int64_t>(sizes.size());
  Add(rank);
  if (view_numbers_ != nullptr) {
    view_numbers_->insert(view_numbers_->end(), sizes.begin(), sizes.end());
    view_numbers_->insert(view_numbers_->end(), strides.begin(), strides.end());
    view_numbers_->push_back(storage_offset);
    view_number_is_size_->insert(view_number_is_size_->end(), rank, true);
    view_number_is_size_->insert(view_number_is_size_->end(), rank + 1, false);
    return;
  }
  for (int64_t d = 0; d < rank; ++d) Add(sizes[d]);
  for (int64_t d = 0; d < rank; ++d) Add(strides[d]);
  Add(storage_offset);
}

void ProgramSignature::AddStatic(const c10::IValue& value) {
  if (value.isNone()) {
    Add(static_cast<int64_t>(StaticKind::kNone));
  } else if (value.isBool()) {
    Add(static_cast<int64_t>(StaticKind::kBool));
    Add(value.toBool());
  } else if (value.isInt()) {
    Add(static_cast<int64_t>(StaticKind::kInt));
    Add(value.toInt());
  } else if (value.isDouble()) {
    Add(static_cast<int64_t>(StaticKind::kDouble));
    Add(std::bit_cast<int64_t>(value.toDouble()));
  } else if (value.isIntList()) {
    Add(static_cast<int64_t>(StaticKind::kIntList));
    const auto list = value.toIntList();
    Add(static_cast<int64_t>(list.size()));
    for (int64_t element : list) Add(element);
  } else if (value.isDoubleList()) {
    Add(static_cast<int64_t>(StaticKind::kDoubleList));
    const auto list = value.toDoubleList();
    Add(static_cast<int64_t>(list.size()));
    for (double element : list) Add(std::bit_cast<int64_t>(element));
  } else if (value.isBoolList()) {
    Add(static_cast<int64_t>(StaticKind::kBoolList));
    const auto list = value.toBoolList();
    Add(static_cast<int64_t>(list.size()));
    for (bool element : list) Add(element);
  } else if (value.isString()) {
    Add(static_cast<int64_t>(StaticKind::kString));
    AddString(value.toStringRef());
  } else if (value.isDevice()) {
    Add(static_cast<int64_t>(StaticKind::kDevice));
    Add(static_cast<int64_t>(value.toDevice().type()));
    Add(value.toDevice().index());
  } else {
    // Rare kinds (complex numbers, generic lists...): their printed form, tagged by kind name.
    // Doubles inside are printed with full precision so distinct values never print alike.
    std::ostringstream text;
    text.precision(17);
    text << value.tagKind() << ':' << value;
    Add(static_cast<int64_t>(StaticKind::kOther));
    AddString(text.str());
  }
}

}  // namespace torch_tpu::exec
