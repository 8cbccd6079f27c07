// One kernel body serves every lowered ATen op in eager mode: it reads the op's schema to sort
// arguments into tensors, runtime scalars, generators and static attributes, runs the op's
// lowering through exec::EagerLaunch, and writes results back for in-place and out= variants.
// Ops of common C++ signatures reach it through an unboxed kernel that borrows their tensors;
// the others through the boxed kernel.
#include "aten/lowered_kernels.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/op_registration/infer_schema.h>
#include <ATen/core/stack.h>
#include <ATen/native/Resize.h>
#include <c10/util/StringUtil.h>
#include <torch/library.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <type_traits>
#include <utility>
#include <unordered_map>

#include "aten/fallback.h"
#include "aten/foreach_calls.h"
#include "aten/index_arguments.h"
#include "aten/index_checks.h"
#include "aten/output_layout.h"
#include "aten/scalar_conversions.h"
#include "aten/schema_arguments.h"
#include "aten/write_checks.h"
#include "exec/eager.h"
#include "lowering/registry.h"
#include "runtime/generator.h"

namespace torch_tpu::aten {
namespace {

using lowering::LoweringEntry;

// What the kernel needs to know about an op's schema, worked out once per op.
struct KernelInfo {
  enum class ArgumentKind : uint8_t { kOut, kGenerator, kScalar, kScalarList, kOther };
  const LoweringEntry* entry = nullptr;
  const lowering::ForeachForm* foreach = nullptr;
  // fill_(number) and zero_, which CPU lets write an expanded tensor.
  bool fills_one_value = false;
  std::string name;
  // ATen's `pointwise` tag, and no argument that shapes the result beyond broadcasting (clone's
  // memory_format, a list).
  bool pointwise = false;
  // The lowering covers real input only; complex input runs the CPU kernel (explicit fallback).
  bool complex_on_cpu = false;
  std::vector<ArgumentKind> kinds;
  std::vector<ScalarConversion> scalar_conversions;
};

// Lowerings of real input only; complex input runs the CPU kernel (counted fallback): geev's
// path for real matrices (linalg_eig.cc), and the LU, QR, Jacobi, Cholesky and triangular-solve
// decompositions (linalg_lu.cc, linalg_qr.cc, linalg_eigh.cc, linalg_solve.cc), which are written
// in real arithmetic.
bool ComplexOnCpu(const std::string& name) {
  static const std::set<std::string> names = {
      "aten::linalg_eig", "aten::linalg_eig.out", "aten::_linalg_eigvals",
      "aten::linalg_eigvals.out", "aten::_linalg_eigh", "aten::_linalg_eigh.eigenvalues",
      "aten::_linalg_svd", "aten::_linalg_svd.U", "aten::linalg_lu_factor_ex",
      "aten::linalg_lu_factor_ex.out", "aten::linalg_lu", "aten::linalg_lu.out", "aten::lu_unpack",
      "aten::lu_unpack.out", "aten::linalg_lu_solve", "aten::linalg_lu_solve.out",
      "aten::_linalg_solve_ex", "aten::_linalg_solve_ex.result", "aten::linalg_inv_ex",
      "aten::linalg_inv_ex.inverse", "aten::_linalg_det", "aten::_linalg_det.result",
      "aten::_linalg_slogdet", "aten::_linalg_slogdet.sign", "aten::geqrf", "aten::geqrf.a",
      "aten::linalg_householder_product", "aten::linalg_householder_product.out", "aten::ormqr",
      "aten::ormqr.out", "aten::linalg_qr", "aten::linalg_qr.out", "aten::linalg_cholesky_ex",
      "aten::linalg_cholesky_ex.L", "aten::cholesky", "aten::cholesky.out",
      "aten::linalg_solve_triangular", "aten::linalg_solve_triangular.out",
      "aten::triangular_solve", "aten::triangular_solve.X", "aten::_cholesky_solve_helper",
      "aten::cholesky_inverse", "aten::cholesky_inverse.out"};
  return names.count(name) > 0;
}

bool FillsOneValue(const std::string& functional_name) {
  return functional_name == "aten::fill.Scalar" || functional_name == "aten::zero";
}

bool HasExpandedDim(const at::Tensor& tensor) {
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    if (tensor.stride(d) == 0 && tensor.size(d) > 1) return true;
  }
  return false;
}

// The view of `tensor`'s elements without its expanded (stride-0) dims' repeats.
at::Tensor DistinctElements(const at::Tensor& tensor) {
  std::vector<int64_t> sizes = tensor.sizes().vec();
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    if (tensor.stride(d) == 0) sizes[d] = std::min<int64_t>(sizes[d], 1);
  }
  return tensor.as_strided(sizes, tensor.strides(), tensor.storage_offset());
}

const KernelInfo& InfoFor(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  // Schemas live as long as their operator, so their address identifies the op.
  thread_local std::unordered_map<const c10::FunctionSchema*, KernelInfo> cache;
  auto it = cache.find(&schema);
  if (it != cache.end()) return it->second;
  KernelInfo info;
  info.name = FullName(schema);
  info.entry = lowering::LoweringRegistry::Get().Find(info.name);
  info.pointwise = op.hasTag(at::Tag::pointwise);
  info.complex_on_cpu = ComplexOnCpu(info.name);
  for (const c10::Argument& argument : schema.arguments()) {
    const c10::TypePtr type = argument.real_type();
    const c10::TypePtr inner = type->kind() == c10::TypeKind::OptionalType
                                   ? type->expectRef<c10::OptionalType>().getElementType()
                                   : type;
    if (inner->kind() == c10::TypeKind::MemoryFormatType ||
        inner->kind() == c10::TypeKind::ListType) {
      info.pointwise = false;
    }
  }
  TORCH_INTERNAL_ASSERT(info.entry != nullptr, "no lowering for ", info.name);
  info.foreach = lowering::FindForeachForm(info.name);
  info.fills_one_value = info.entry->variant == LoweringEntry::Variant::kInPlace &&
                         FillsOneValue(info.entry->functional_name);
  info.scalar_conversions = ScalarConversionsOf(info.entry->functional_name, schema);
  for (const c10::Argument& argument : schema.arguments()) {
    if (info.entry->variant == LoweringEntry::Variant::kOut && IsOutArgument(argument)) {
      info.kinds.push_back(KernelInfo::ArgumentKind::kOut);
    } else if (IsGeneratorType(argument.type())) {
      info.kinds.push_back(KernelInfo::ArgumentKind::kGenerator);
    } else if (IsScalarType(argument.type())) {
      info.kinds.push_back(KernelInfo::ArgumentKind::kScalar);
    } else if (IsScalarListType(argument.type())) {
      info.kinds.push_back(KernelInfo::ArgumentKind::kScalarList);
    } else {
      info.kinds.push_back(KernelInfo::ArgumentKind::kOther);
    }
  }
  return cache.emplace(&schema, std::move(info)).first->second;
}

// The checks every call makes before its launch (after index lists are prepared).
void CheckArguments(const c10::FunctionSchema& schema, const KernelInfo& info,
                    const std::vector<c10::IValue>& values) {
  CheckWrites(schema, values);
  CheckScalarConversions(info.scalar_conversions, values);
}

// Runs the op's lowering over `values` (the schema's arguments, alive until it returns) and
// returns its results: new tensors, the written destination of an in-place op, or the out=
// tensors, resized and written.
std::vector<at::Tensor> LaunchLowered(const c10::OperatorHandle& op, const KernelInfo& info,
                                      const std::vector<c10::IValue>& values) {
  const LoweringEntry* entry = info.entry;
  using ArgumentKind = KernelInfo::ArgumentKind;
  const auto& arguments = op.schema().arguments();
  if (exec::CurrentExecutionMode() == exec::ExecutionMode::kDebug) {
    CheckIndicesInDebugMode(entry->functional_name, values);
  }
  // The launch borrows the tensors of `values`, which outlive it.
  exec::EagerLaunch launch(entry->functional_name);
  launch.ReserveOperands(arguments.size());
  if (info.pointwise) launch.SetPointwise();
  if (info.foreach && !entry->implicit_random) {
    if (auto shapes = FlattenedForeachShapes(*info.foreach, values)) {
      launch.SetFlattenLists(std::move(*shapes));
    }
  }
  std::vector<at::Tensor> outs;
  if (entry->implicit_random) {
    const auto [seed, offset] = runtime::ResolveGenerator(std::nullopt)->Reserve();
    launch.AddRngState(seed, offset);
  }
  for (size_t i = 0; i < arguments.size(); ++i) {
    const ArgumentKind kind = info.kinds[i];
    const c10::IValue& value = values[i];
    if (kind == ArgumentKind::kOut) {
      outs.push_back(value.toTensor());
    } else if (kind == ArgumentKind::kGenerator) {
      std::optional<at::Generator> generator;
      if (value.isGenerator()) generator = value.toGenerator();
      runtime::TpuGenerator* tpu_generator = runtime::ResolveGenerator(generator);
      const auto [seed, offset] = tpu_generator->Reserve();
      launch.AddRngState(seed, offset);
    } else if (value.isTensor() && !value.toTensor().defined()) {
      launch.AddStatic(c10::IValue());  // an absent Tensor? argument
    } else if (value.isTensor()) {
      launch.AddBorrowedTensor(value.toTensor());
    } else if (value.isTensorList()) {
      launch.AddTensorList(value.toTensorVector());
    } else if (value.isOptionalTensorList()) {
      launch.AddOptionalTensorList(value.toOptionalTensorList().vec());
    } else if (kind == ArgumentKind::kScalar && !value.isNone()) {
      launch.AddScalar(value.toScalar());
    } else if (kind == ArgumentKind::kScalarList) {
      for (const c10::IValue& scalar : value.toListRef()) launch.AddScalar(scalar.toScalar());
    } else {
      launch.AddStatic(value);
    }
  }
  const bool in_place = entry->variant == LoweringEntry::Variant::kInPlace;
  if (in_place && values[0].isTensorList()) {
    const auto written = values[0].toTensorList();  // foreach ops: result i goes to self[i]
    for (size_t i = 0; i < written.size(); ++i) launch.WriteResultTo(i, written[i]);
  } else if (in_place) {
    launch.WriteResultToBorrowed(0, values[0].toTensor());
  }
  if (entry->variant == LoweringEntry::Variant::kFunctional) {
    launch.SetOutputStrides([&op, &values] { return MetaOutputStrides(op, values); });
    launch.SetOutputDimOrders([&op, &values] { return MetaOutputDimOrders(op, values); });
  }
  std::vector<at::Tensor> results = launch.Run(*entry->function);
  if (entry->variant != LoweringEntry::Variant::kOut) return results;
  TORCH_CHECK(outs.size() == results.size(), info.name, ": expected ", results.size(),
              " out= tensors, got ", outs.size());
  for (size_t k = 0; k < outs.size(); ++k) {
    TORCH_CHECK(c10::canCast(results[k].scalar_type(), outs[k].scalar_type()), info.name,
                ": result type ", results[k].scalar_type(), " can't be cast to the desired ",
                "output type ", outs[k].scalar_type());
    at::native::resize_output(outs[k], results[k].sizes());
    outs[k].copy_(results[k]);
  }
  return outs;
}

// The boxed kernel: any lowered op, called with its arguments on `stack`.
void LoweredKernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const KernelInfo& info = InfoFor(op);
  const auto& arguments = schema.arguments();
  if (info.complex_on_cpu) {
    for (size_t i = 0; i < arguments.size(); ++i) {
      const c10::IValue& value = (stack->end() - arguments.size() + i)[0];
      if (info.kinds[i] != KernelInfo::ArgumentKind::kOut && value.isTensor() &&
          value.toTensor().defined() && value.toTensor().is_complex()) {
        CpuFallback(op, stack);
        return;
      }
    }
  }
  std::vector<c10::IValue> values(std::make_move_iterator(stack->end() - arguments.size()),
                                  std::make_move_iterator(stack->end()));
  torch::jit::drop(*stack, arguments.size());
  PrepareIndexArguments(schema, values);
  CheckArguments(schema, info, values);

  const bool in_place = info.entry->variant == LoweringEntry::Variant::kInPlace;
  // fill_(number) and zero_ of an expanded tensor (CPU allows them: every alias gets the one
  // value) write its distinct elements.
  std::optional<at::Tensor> expanded_self;
  if (info.fills_one_value && HasExpandedDim(values[0].toTensor())) {
    expanded_self = values[0].toTensor();
    values[0] = DistinctElements(*expanded_self);
  }
  if (info.foreach && RunForeachPerElementWhereNeeded(*info.foreach, in_place, values, stack)) {
    return;
  }
  std::vector<at::Tensor> results = LaunchLowered(op, info, values);
  if (info.entry->variant == LoweringEntry::Variant::kOut) {
    for (at::Tensor& out : results) torch::jit::push(*stack, std::move(out));
    return;
  }
  if (schema.returns().empty()) return;  // in-place foreach ops
  if (expanded_self) {
    torch::jit::push(*stack, *expanded_self);
    return;
  }
  if (schema.returns().size() == 1 &&
      schema.returns()[0].real_type()->kind() == c10::TypeKind::ListType) {
    // A Tensor[] result (tpu_kernels::jax_call, foreach ops) goes back as one list.
    torch::jit::push(*stack, c10::List<at::Tensor>(results));
    return;
  }
  for (auto& result : results) torch::jit::push(*stack, std::move(result));
}

bool IsWrittenArgument(const c10::Argument& argument) {
  return argument.alias_info() && argument.alias_info()->isWrite();
}

// The arguments of an unboxed call as the schema's IValues, tensors borrowed from the caller
// (whose references outlive the call) and let go without a decrement at the end. A boxed call
// copies each tensor onto its stack instead, and the first C++ copy of a tensor Python holds
// increfs its PyObject, which takes the GIL (released around every ATen call from Python): two
// lock round trips per tensor argument of every op.
class BorrowedArguments {
 public:
  explicit BorrowedArguments(size_t count) { values_.reserve(count); }
  BorrowedArguments(const BorrowedArguments&) = delete;
  BorrowedArguments& operator=(const BorrowedArguments&) = delete;
  ~BorrowedArguments() {
    for (size_t i = 0; i < values_.size(); ++i) {
      if (borrowed_ >> i & 1) c10::MaybeOwnedTraits<c10::IValue>::destroyBorrow(values_[i]);
    }
  }

  void Push(const at::Tensor& tensor) {
    values_.emplace_back();  // the slot first: a borrow destroyed by a throw would decrement
    values_.back() = c10::IValue(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(tensor));
    borrowed_ |= uint64_t{1} << (values_.size() - 1);
  }
  void Push(const std::optional<at::Tensor>& tensor) {
    if (tensor.has_value()) {
      Push(*tensor);
    } else {
      values_.emplace_back();
    }
  }
  template <class Value>
  void Push(const Value& value) {
    values_.emplace_back(value);
  }

  // Read only: replacing a borrowed entry would decrement a count it never took.
  const std::vector<c10::IValue>& values() const { return values_; }

 private:
  std::vector<c10::IValue> values_;
  uint64_t borrowed_ = 0;  // fewer than 64 arguments: UnboxedSignatures has no longer one
};

template <class First, class... Rest>
First& FirstOf(First& first, Rest&...) {
  return first;
}

template <class Return>
struct Returned {
  template <class... Args>
  static Return From(std::vector<at::Tensor>& results, Args&... args) {
    if constexpr (std::is_same_v<Return, at::Tensor>) {
      return std::move(results.at(0));
    } else if constexpr (std::is_same_v<Return, at::Tensor&>) {
      return FirstOf(args...);  // in-place: the written self
    } else {
      return ToTuple(results, std::make_index_sequence<std::tuple_size_v<Return>>());
    }
  }
  template <size_t... I>
  static Return ToTuple(std::vector<at::Tensor>& results, std::index_sequence<I...>) {
    TORCH_INTERNAL_ASSERT(results.size() == sizeof...(I));
    return Return(std::move(results[I])...);
  }
};

// An unboxed kernel of `Signature` for one op: its arguments reach the lowering borrowed.
template <class Signature>
struct UnboxedLoweredKernel;

template <class Return, class... Args>
struct UnboxedLoweredKernel<Return(Args...)> {
  static torch::CppFunction For(const c10::OperatorHandle& op) {
    // The op's info, worked out once here rather than looked up at every call.
    auto shared_info = std::make_shared<const KernelInfo>(InfoFor(op));
    return torch::CppFunction([op, shared_info](Args... args) -> Return {
      const KernelInfo& info = *shared_info;
      BorrowedArguments arguments(sizeof...(Args));
      (arguments.Push(args), ...);
      CheckArguments(op.schema(), info, arguments.values());
      std::vector<at::Tensor> results = LaunchLowered(op, info, arguments.values());
      return Returned<Return>::From(results, args...);
    });
  }
  // Whether `schema`'s C++ signature (ATen's codegen: a written Tensor(a!) argument is a
  // `Tensor&`, a returned one `Tensor&`; other tensors `const Tensor&` and results by value) is
  // this one. Types alone do not tell add(Tensor, Scalar) from __ilshift__(Tensor(a!), Scalar).
  static bool Fits(const c10::FunctionSchema& schema) {
    static const std::unique_ptr<c10::FunctionSchema> inferred =
        c10::detail::inferFunctionSchemaFromFunctor<Return(Args...)>();
    if (c10::findSchemaDifferences(*inferred, schema).has_value()) return false;
    constexpr bool kWritten[] = {std::is_same_v<Args, at::Tensor&>...};
    for (size_t i = 0; i < sizeof...(Args); ++i) {
      const c10::Argument& argument = schema.arguments()[i];
      if (IsWrittenArgument(argument) != kWritten[i]) return false;
      // The compared types erase ScalarType and MemoryFormat to int; the real ones keep them.
      if (*argument.real_type() != *inferred->arguments()[i].real_type()) return false;
    }
    for (const c10::Argument& result : schema.returns()) {
      if (IsWrittenArgument(result) != std::is_reference_v<Return>) return false;
    }
    return true;
  }
};

using Self = at::Tensor&;
using In = const at::Tensor&;
using OptIn = const std::optional<at::Tensor>&;
using Num = const c10::Scalar&;
using OptNum = const std::optional<c10::Scalar>&;
using Tensors2 = std::tuple<at::Tensor, at::Tensor>;
using Tensors3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// The C++ signatures of the ops most programs call most (elementwise, matmul, reductions,
// softmax, normalization, losses, their backward and in-place forms): an op whose schema is one
// of them gets an unboxed kernel, any other the boxed one. Order does not matter: at most one
// fits a schema.
template <class... Signatures>
struct SignatureList {};
using UnboxedSignatures = SignatureList<
    at::Tensor(In), at::Tensor(In, In), at::Tensor(In, In, Num), at::Tensor(In, Num),
    at::Tensor(In, Num, Num), at::Tensor(In, In, In), at::Tensor(In, In, In, Num),
    at::Tensor(In, In, In, Num, Num), at::Tensor(In, c10::string_view),
    at::Tensor(In, In, c10::string_view), at::Tensor(In, int64_t, bool),
    at::Tensor(In, In, int64_t, at::ScalarType),
    at::Tensor(In, at::OptionalIntArrayRef, bool, std::optional<at::ScalarType>),
    at::Tensor(In, std::optional<at::ScalarType>), at::Tensor(In, OptNum, OptNum),
    at::Tensor(In, OptIn, OptIn), at::Tensor(In, In, c10::SymInt, bool, bool),
    at::Tensor(In, at::IntArrayRef, bool), at::Tensor(In, int64_t, std::optional<at::ScalarType>),
    Tensors2(In, int64_t, bool), Tensors2(In, double, std::optional<bool>),
    Tensors3(In, c10::SymIntArrayRef, OptIn, OptIn, double),
    Tensors3(In, In, c10::SymIntArrayRef, In, In, OptIn, OptIn, std::array<bool, 3>),
    Tensors2(In, In, OptIn, int64_t, c10::SymInt),
    at::Tensor(In, In, In, OptIn, int64_t, c10::SymInt, In),
    at::Tensor(In, std::optional<at::MemoryFormat>), at::Tensor(In, In, double),
    at::Tensor(In, In, c10::SymInt, c10::SymInt, bool),
    Tensors3(In, In, OptIn, OptIn, OptIn, OptIn, OptIn, bool, double, std::array<bool, 3>),
    Tensors2(In, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, bool),
    at::Tensor(In, In, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, bool,
               In),
    at::Tensor&(Self),
    at::Tensor&(Self, In), at::Tensor&(Self, In, Num), at::Tensor&(Self, Num),
    at::Tensor&(Self, Num, Num), at::Tensor&(Self, In, In, Num)>;

template <class... Signatures>
std::optional<torch::CppFunction> UnboxedOf(const c10::OperatorHandle& op,
                                            SignatureList<Signatures...>) {
  std::optional<torch::CppFunction> kernel;
  ((!kernel && UnboxedLoweredKernel<Signatures>::Fits(op.schema())
        ? (kernel.emplace(UnboxedLoweredKernel<Signatures>::For(op)), true)
        : false),
   ...);
  return kernel;
}

// An unboxed kernel for `op` when its signature is listed and its calls go straight to one
// launch (no complex input on the CPU, no foreach lists, no argument replaced before the launch,
// no out= tensors; the listed signatures have no index lists to prepare); otherwise nullopt and
// the boxed kernel serves it.
std::optional<torch::CppFunction> UnboxedFor(const c10::OperatorHandle& op) {
  const KernelInfo& info = InfoFor(op);
  if (info.complex_on_cpu || info.foreach || info.fills_one_value ||
      info.entry->variant == LoweringEntry::Variant::kOut) {
    return std::nullopt;
  }
  return UnboxedOf(op, UnboxedSignatures());
}

}  // namespace

namespace {

bool IsWritten(const c10::Argument& argument) {
  return argument.alias_info() && argument.alias_info()->isWrite();
}

c10::OperatorName SchemaName(const std::string& overload_name) {
  const auto dot = overload_name.find('.');
  return c10::OperatorName(overload_name.substr(0, dot),
                           dot == std::string::npos ? "" : overload_name.substr(dot + 1));
}

// Why `name` cannot serve as registered (its schema is not of the declared variant kind, or its
// inputs differ from the functional overload's), or "" when it can.
std::string VariantMismatch(const std::string& name, const LoweringEntry& entry,
                            const c10::FunctionSchema& schema,
                            const c10::FunctionSchema& functional) {
  const auto& arguments = schema.arguments();
  std::vector<std::string> inputs;
  bool writes = false;
  for (const c10::Argument& argument : arguments) {
    writes = writes || IsWritten(argument);
    if (!IsOutArgument(argument)) inputs.push_back(argument.name());
  }
  switch (entry.variant) {
    case LoweringEntry::Variant::kFunctional:
      if (writes) return name + " is registered as functional but writes an argument";
      return "";
    case LoweringEntry::Variant::kInPlace:
      if (arguments.empty() || !IsWritten(arguments[0]) || IsOutArgument(arguments[0])) {
        return name + " is registered as the in-place variant of " + entry.functional_name +
               " but does not write self";
      }
      break;
    case LoweringEntry::Variant::kOut:
      if (inputs.size() == arguments.size()) {
        return name + " is registered as the out= variant of " + entry.functional_name +
               " but has no out= argument";
      }
      break;
  }
  // A variant receives its inputs exactly as the functional lowering would.
  std::vector<std::string> functional_inputs;
  for (const c10::Argument& argument : functional.arguments()) {
    functional_inputs.push_back(argument.name());
  }
  if (inputs != functional_inputs) {
    return name + " does not take the inputs of " + entry.functional_name;
  }
  return "";
}

}  // namespace

std::vector<std::string> LoweredOverloadNames() {
  std::vector<std::string> names;
  for (std::string& name : lowering::LoweringRegistry::Get().OverloadNames()) {
    // Internal lowerings (torch_tpu::...) serve host-side kernels and are not operators.
    if (!name.starts_with("torch_tpu::")) names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

std::vector<std::string>& UnboxedNames() {
  static std::vector<std::string> names;
  return names;
}

}  // namespace

std::vector<std::string> UnboxedLoweredOverloadNames() { return UnboxedNames(); }

void RegisterLoweredKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Names are written by hand next to each lowering: a misspelled one, or a variant named as
    // the wrong kind, would leave an op silently on the CPU fallback or feed a lowering the wrong
    // operands, so the import fails instead, naming every offending overload.
    const auto& registry = lowering::LoweringRegistry::Get();
    auto& dispatcher = c10::Dispatcher::singleton();
    const std::vector<std::string> names = LoweredOverloadNames();
    std::vector<std::string> problems = registry.errors();
    for (const std::string& name : names) {
      const auto op = dispatcher.findOp(SchemaName(name));
      if (!op.has_value()) {
        problems.push_back(name + " is not an operator of this torch");
        continue;
      }
      const LoweringEntry& entry = *registry.Find(name);
      const auto functional = dispatcher.findOp(SchemaName(entry.functional_name));
      if (!functional.has_value()) continue;  // reported under its own name
      std::string mismatch = VariantMismatch(name, entry, op->schema(), functional->schema());
      if (!mismatch.empty()) problems.push_back(std::move(mismatch));
    }
    TORCH_CHECK(problems.empty(), "torch_tpu: lowerings registered under overload names that ",
                "do not fit this torch: ", c10::Join("; ", problems));
    // Created here rather than statically: lowerings register during static initialization of
    // several files, whose order is unspecified; by now all of them have run.
    // One library per operator namespace (aten, and tpu_kernels for traced JAX kernels).
    static std::map<std::string, torch::Library> libraries;
    for (const std::string& name : names) {
      const std::string ns = name.substr(0, name.find("::"));
      auto it = libraries.find(ns);
      if (it == libraries.end()) {
        it = libraries
                 .emplace(std::piecewise_construct, std::forward_as_tuple(ns),
                          std::forward_as_tuple(torch::Library::IMPL, ns,
                                                c10::DispatchKey::PrivateUse1, __FILE__, __LINE__))
                 .first;
      }
      const std::string overload = name.substr(ns.size() + 2);
      if (auto unboxed = UnboxedFor(*dispatcher.findOp(SchemaName(name)))) {
        it->second.impl(overload.c_str(), std::move(*unboxed));
        UnboxedNames().push_back(name);  // `names` is sorted
      } else {
        it->second.impl(overload.c_str(),
                        torch::CppFunction::makeFromBoxedFunction<&LoweredKernel>());
      }
    }
  });
}

}  // namespace torch_tpu::aten
