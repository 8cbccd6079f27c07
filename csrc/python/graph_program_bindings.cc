// Python side of exec::GraphProgram: torch_tpu._dynamo converts an FX graph into nodes whose
// arguments are references to graph values, lists of them, or plain Python values; here each
// argument is sorted into its operand kind by the op's schema, as the eager kernel does.
#include "python/graph_program_bindings.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <pybind11/stl.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Layout.h>
#include <torch/csrc/MemoryFormat.h>
#include <torch/csrc/utils/pybind.h>

#include "aten/schema_arguments.h"
#include "exec/graph_program.h"
#include "lowering/registry.h"

namespace py = pybind11;

namespace torch_tpu::python {
namespace {

using exec::GraphArgument;
using exec::GraphNode;
using exec::GraphTensorMeta;
using exec::GraphValueRef;

GraphValueRef ToRef(const py::tuple& encoded) {
  // ("ref", is_node, index, result)
  GraphValueRef ref;
  ref.kind = encoded[1].cast<bool>() ? GraphValueRef::Kind::kNode : GraphValueRef::Kind::kInput;
  ref.index = encoded[2].cast<int>();
  ref.result = encoded[3].cast<int>();
  return ref;
}

GraphTensorMeta ToMeta(const py::tuple& encoded) {
  // (sizes, strides, storage_offset, dtype)
  GraphTensorMeta meta;
  meta.sizes = encoded[0].cast<std::vector<int64_t>>();
  meta.strides = encoded[1].cast<std::vector<int64_t>>();
  meta.storage_offset = encoded[2].cast<int64_t>();
  PyObject* dtype = encoded[3].ptr();
  if (encoded[3].is_none()) return meta;  // an absent result (None)
  TORCH_CHECK(THPDtype_Check(dtype), "graph metadata: expected a torch.dtype");
  meta.dtype = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
  return meta;
}

// The plain Python values FX graphs hold as static arguments.
c10::IValue ToStatic(const py::handle& value, const std::string& op) {
  if (value.is_none()) return c10::IValue();
  if (py::isinstance<py::bool_>(value)) return c10::IValue(value.cast<bool>());
  if (py::isinstance<py::int_>(value)) return c10::IValue(value.cast<int64_t>());
  if (py::isinstance<py::float_>(value)) return c10::IValue(value.cast<double>());
  if (PyComplex_Check(value.ptr())) {
    return c10::IValue(c10::complex<double>(PyComplex_RealAsDouble(value.ptr()),
                                            PyComplex_ImagAsDouble(value.ptr())));
  }
  if (py::isinstance<py::str>(value)) return c10::IValue(value.cast<std::string>());
  PyObject* object = value.ptr();
  if (THPDtype_Check(object)) return c10::IValue(reinterpret_cast<THPDtype*>(object)->scalar_type);
  if (THPMemoryFormat_Check(object)) {
    return c10::IValue(reinterpret_cast<THPMemoryFormat*>(object)->memory_format);
  }
  if (THPLayout_Check(object)) return c10::IValue(reinterpret_cast<THPLayout*>(object)->layout);
  if (THPDevice_Check(object)) return c10::IValue(reinterpret_cast<THPDevice*>(object)->device);
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    const py::sequence items = value.cast<py::sequence>();
    bool all_bool = true, all_int = true;
    for (const py::handle item : items) {
      all_bool = all_bool && py::isinstance<py::bool_>(item);
      all_int = all_int && py::isinstance<py::int_>(item) && !py::isinstance<py::bool_>(item);
    }
    if (all_bool && py::len(items) > 0) return c10::IValue(items.cast<std::vector<bool>>());
    if (all_int) return c10::IValue(items.cast<std::vector<int64_t>>());
    return c10::IValue(items.cast<std::vector<double>>());
  }
  throw c10::NotImplementedError(
      {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
      op + ": an argument of Python type " + py::str(value.get_type()).cast<std::string>());
}

bool IsPythonNumber(const py::handle& value) {
  return py::isinstance<py::bool_>(value) || py::isinstance<py::int_>(value) ||
         py::isinstance<py::float_>(value) || PyComplex_Check(value.ptr());
}

GraphArgument ToArgument(const py::tuple& encoded, const c10::Argument* schema_argument,
                         const std::string& op) {
  GraphArgument argument;
  const std::string tag = encoded[0].cast<std::string>();
  if (tag == "ref") {
    argument.kind = GraphArgument::Kind::kTensor;
    argument.ref = ToRef(encoded);
    return argument;
  }
  if (tag == "list") {
    const bool optional =
        schema_argument != nullptr && schema_argument->type()->kind() == c10::TypeKind::ListType &&
        schema_argument->type()->containedType(0)->kind() == c10::TypeKind::OptionalType;
    argument.kind =
        optional ? GraphArgument::Kind::kOptionalTensorList : GraphArgument::Kind::kTensorList;
    for (const py::handle item : encoded[1].cast<py::list>()) {
      if (item.is_none()) {
        argument.refs.push_back(std::nullopt);
      } else {
        argument.refs.push_back(ToRef(item.cast<py::tuple>()));
      }
    }
    return argument;
  }
  if (tag == "generator") {
    // ("generator", index into the run's generators): a generator input or constant.
    TORCH_CHECK(schema_argument != nullptr && aten::IsGeneratorType(schema_argument->type()),
                "graph node ", op, ": a generator where the schema takes none");
    argument.kind = GraphArgument::Kind::kGenerator;
    argument.generator = encoded[1].cast<int>();
    return argument;
  }
  TORCH_CHECK(tag == "value", "graph node ", op, ": unknown argument tag ", tag);
  const py::handle value = encoded[1];
  if (schema_argument == nullptr) {
    // Internal lowerings have no schema: the tag says what the value is.
    argument.value = ToStatic(value, op);
    if (IsPythonNumber(value) && encoded.size() > 2 && encoded[2].cast<std::string>() == "scalar") {
      argument.kind = GraphArgument::Kind::kScalar;
    }
    return argument;
  }
  const c10::TypePtr& type = schema_argument->type();
  if (aten::IsGeneratorType(type)) {
    argument.kind = GraphArgument::Kind::kGenerator;
  } else if (!value.is_none() && aten::IsScalarType(type)) {
    argument.kind = GraphArgument::Kind::kScalar;
    argument.value = ToStatic(value, op);
  } else {
    if (IsPythonNumber(value) && type->kind() == c10::TypeKind::TensorType) {
      argument.kind = GraphArgument::Kind::kNumber;
    }
    argument.value = ToStatic(value, op);
  }
  return argument;
}

std::shared_ptr<exec::GraphProgram> MakeGraphProgram(const py::list& nodes, const py::list& inputs,
                                                     const py::list& outputs,
                                                     const std::string& description) {
  std::vector<GraphNode> graph_nodes;
  for (const py::handle item : nodes) {
    // (op, kind, arguments, results[, generator]): the generator (an index into the run's
    // generators) every draw of a graph-safe RNG node comes from.
    const py::tuple encoded = item.cast<py::tuple>();
    GraphNode node;
    node.op = encoded[0].cast<std::string>();
    node.kind = static_cast<GraphNode::Kind>(encoded[1].cast<int>());
    if (encoded.size() > 4) node.generator = encoded[4].cast<int>();
    const c10::FunctionSchema* schema = nullptr;
    if (node.kind == GraphNode::Kind::kLowered && node.op.rfind("aten::", 0) == 0) {
      const std::string name = node.op.substr(0, node.op.find('.'));
      const auto dot = node.op.find('.');
      const auto handle = c10::Dispatcher::singleton().findOp(
          {name, dot == std::string::npos ? "" : node.op.substr(dot + 1)});
      TORCH_CHECK(handle.has_value(), "graph node: no operator ", node.op);
      schema = &handle->schema();
    }
    const py::list arguments = encoded[2].cast<py::list>();
    TORCH_CHECK(schema == nullptr || arguments.size() == schema->arguments().size(), node.op,
                ": expected ", schema ? schema->arguments().size() : 0, " arguments, got ",
                arguments.size());
    for (size_t a = 0; a < arguments.size(); ++a) {
      node.arguments.push_back(ToArgument(arguments[a].cast<py::tuple>(),
                                          schema ? &schema->arguments()[a] : nullptr, node.op));
    }
    for (const py::handle meta : encoded[3].cast<py::list>()) {
      node.results.push_back(ToMeta(meta.cast<py::tuple>()));
    }
    graph_nodes.push_back(std::move(node));
  }
  std::vector<GraphTensorMeta> input_metas;
  for (const py::handle meta : inputs) input_metas.push_back(ToMeta(meta.cast<py::tuple>()));
  std::vector<GraphValueRef> output_refs;
  for (const py::handle ref : outputs) output_refs.push_back(ToRef(ref.cast<py::tuple>()));
  return std::make_shared<exec::GraphProgram>(std::move(graph_nodes), std::move(input_metas),
                                              std::move(output_refs), description);
}

}  // namespace

void BindGraphProgram(py::module& module) {
  py::class_<exec::GraphProgram, std::shared_ptr<exec::GraphProgram>>(module, "_GraphProgram")
      .def(py::init(&MakeGraphProgram), py::arg("nodes"), py::arg("inputs"), py::arg("outputs"),
           py::arg("description"))
      .def("run", &exec::GraphProgram::Run, py::arg("inputs"),
           py::arg("generators") = std::vector<at::Generator>{},
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("program_count", &exec::GraphProgram::program_count);
  module.def("_has_lowering", [](const std::string& overload_name) {
    return lowering::LoweringRegistry::Get().Find(overload_name) != nullptr;
  });
}

}  // namespace torch_tpu::python
