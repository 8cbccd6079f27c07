// Foreach ops lowered as one program: each element goes through its element op's own lowering,
// so a foreach op computes exactly what PyTorch's per-tensor loop (its CPU kernel) computes.
#include "lowering/foreach.h"

#include <c10/util/Exception.h>

#include <cctype>
#include <unordered_map>

#include "lowering/context.h"

namespace torch_tpu::lowering {
namespace {

std::unordered_map<std::string, ForeachForm>& Forms() {
  static std::unordered_map<std::string, ForeachForm> forms;
  return forms;
}

// The list length: that of the first Tensor[] argument (Scalar[] ones come after it).
size_t ListLength(const ForeachForm& form, std::span<const Operand> operands) {
  size_t position = 0;
  for (char letter : form.arguments) {
    if (letter == 'T') return operands[position].values.size();
    if (std::isupper(static_cast<unsigned char>(letter))) ++position;
  }
  TORCH_INTERNAL_ASSERT(false, "foreach form without a tensor list: ", form.element);
}

std::vector<Value> ApplyToEach(const ForeachForm& form, LoweringContext& context,
                               std::span<const Operand> operands) {
  // Looked up here, not at registration: lowerings of other files may register later.
  const LoweringFunction& element = LoweringRegistry::Get().Function(form.element);
  const size_t count = ListLength(form, operands);
  std::vector<Value> results;
  results.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    std::vector<Operand> arguments;
    size_t position = 0;
    for (char letter : form.arguments) {
      Operand argument;
      switch (letter) {
        case 'T': {
          const Operand& list = operands[position++];
          TORCH_CHECK(list.values.size() == count,
                      "Tensor lists must have the same number of tensors, got ", count, " and ",
                      list.values.size());
          argument.kind = Operand::Kind::kTensor;
          argument.value = list.values[i];
          argument.dtype = list.dtypes[i];
          break;
        }
        case 'L':
          argument = operands[position + i];
          position += count;
          break;
        case 'n':
          argument.ivalue = c10::IValue();
          break;
        case 'f':
          argument.ivalue = false;
          break;
        default:  // S, X, C
          argument = operands[position++];
          break;
      }
      arguments.push_back(std::move(argument));
    }
    results.push_back(element(context, arguments).at(0));
  }
  return results;
}

// Registers aten::_foreach_<op>[.<overload>] (and its in-place variant when `in_place`) with the
// lowering that applies `element` to each element.
void RegisterForeach(std::string_view op, std::string_view overload, std::string element,
                     std::string element_in_place, std::string arguments, bool in_place = true) {
  const std::string suffix = overload.empty() ? "" : "." + std::string(overload);
  const std::string functional = "aten::_foreach_" + std::string(op) + suffix;
  const std::string in_place_name = "aten::_foreach_" + std::string(op) + "_" + suffix;
  ForeachForm& form = Forms()[functional];
  form = ForeachForm{std::move(element), std::move(element_in_place), std::move(arguments)};
  if (in_place) Forms()[in_place_name] = form;
  const ForeachForm* shared = &form;  // map nodes stay where they are
  LoweringRegistry::Get().Register(
      functional,
      [shared](LoweringContext& context, std::span<const Operand> operands) {
        return ApplyToEach(*shared, context, operands);
      },
      in_place ? in_place_name : "");
}

// Element ops whose in-place overload is the functional name with '_' before the overload.
std::string InPlaceOf(const std::string& element) {
  const size_t dot = element.find('.');
  if (dot == std::string::npos) return element + "_";
  return element.substr(0, dot) + "_" + element.substr(dot);
}

struct Binary {
  const char* op;
  const char* list_element;  // the .List (and .Tensor) element overload
  const char* scalar_element;
  bool alpha;   // .List takes an alpha (add, sub)
  bool tensor;  // has a .Tensor overload (one 0-d tensor for all elements)
};

// The maximum/minimum overloads run clamp_min/clamp_max per element, as PyTorch's do.
constexpr Binary kBinaries[] = {
    {"add", "aten::add.Tensor", "aten::add.Scalar", true, true},
    {"sub", "aten::sub.Tensor", "aten::sub.Scalar", true, false},
    {"mul", "aten::mul.Tensor", "aten::mul.Scalar", false, true},
    {"div", "aten::div.Tensor", "aten::div.Scalar", false, true},
    {"clamp_min", "aten::clamp_min.Tensor", "aten::clamp_min", false, false},
    {"clamp_max", "aten::clamp_max.Tensor", "aten::clamp_max", false, false},
    {"maximum", "aten::clamp_min.Tensor", "aten::clamp_min", false, false},
    {"minimum", "aten::clamp_max.Tensor", "aten::clamp_max", false, false},
};

constexpr const char* kUnaries[] = {
    "abs",   "acos",  "asin", "atan",       "ceil",  "cos",   "cosh",    "erf",  "erfc", "exp",
    "expm1", "floor", "frac", "lgamma",     "log",   "log10", "log1p",   "log2", "neg",  "sin",
    "sinh",  "sqrt",  "tan",  "reciprocal", "round", "rsqrt", "sigmoid", "sign", "tanh", "trunc",
    "zero"};

bool RegisterAll() {
  for (const Binary& binary : kBinaries) {
    const std::string list = binary.list_element;
    const std::string scalar = binary.scalar_element;
    RegisterForeach(binary.op, "List", list, InPlaceOf(list), binary.alpha ? "TTS" : "TT");
    RegisterForeach(binary.op, "Scalar", scalar, InPlaceOf(scalar), "TS");
    RegisterForeach(binary.op, "ScalarList", scalar, InPlaceOf(scalar), "TL");
    if (binary.tensor) {
      RegisterForeach(binary.op, "Tensor", list, InPlaceOf(list), binary.alpha ? "TXS" : "TX");
    }
  }
  for (const char* op : {"addcmul", "addcdiv"}) {
    const std::string element = std::string("aten::") + op;
    RegisterForeach(op, "Scalar", element, element + "_", "TTTS");
    RegisterForeach(op, "ScalarList", element, element + "_", "TTTL");
  }
  RegisterForeach("lerp", "List", "aten::lerp.Tensor", "aten::lerp_.Tensor", "TTT");
  RegisterForeach("lerp", "Scalar", "aten::lerp.Scalar", "aten::lerp_.Scalar", "TTS");
  RegisterForeach("lerp", "ScalarList", "aten::lerp.Scalar", "aten::lerp_.Scalar", "TTL");
  RegisterForeach("pow", "List", "aten::pow.Tensor_Tensor", "aten::pow_.Tensor", "TT");
  RegisterForeach("pow", "Scalar", "aten::pow.Tensor_Scalar", "aten::pow_.Scalar", "TS");
  RegisterForeach("pow", "ScalarList", "aten::pow.Tensor_Scalar", "aten::pow_.Scalar", "TL");
  RegisterForeach("pow", "ScalarAndTensor", "aten::pow.Scalar", "", "ST", /*in_place=*/false);
  for (const char* op : kUnaries) {
    const std::string element = std::string("aten::") + op;
    RegisterForeach(op, "", element, element + "_", "T");
  }
  // _foreach_norm(self, ord, dtype) -> linalg_vector_norm(self[i], ord, None, False, dtype).
  RegisterForeach("norm", "Scalar", "aten::linalg_vector_norm", "", "TSnfC", /*in_place=*/false);
  return true;
}
[[maybe_unused]] const bool registered = RegisterAll();

}  // namespace

const ForeachForm* FindForeachForm(std::string_view overload_name) {
  auto it = Forms().find(std::string(overload_name));
  return it == Forms().end() ? nullptr : &it->second;
}

}  // namespace torch_tpu::lowering
