// Builder for one StableHLO function, emitted as MLIR text in generic op syntax.
//
// The generic syntax ("stablehlo.add"(...) {...} : (...) -> ...) is used instead of the pretty
// syntax because its grammar does not change between StableHLO releases, so the text stays
// parseable by whatever XLA version a PJRT plugin embeds.
//
// Every op infers its result type from its operands and attributes and validates them against the
// StableHLO spec before anything is emitted: a type error becomes a BuilderError at the call site
// that caused it, instead of an opaque compiler failure when the module is later loaded.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "element_type.h"
#include "tensor_type.h"

namespace torch_tpu::stablehlo {

class FunctionBuilder;

// Functions defined outside the builder and linked into its module: a traced JAX kernel. `text`
// holds private func.func definitions (the entry and every function it calls) whose symbols are
// already unique to this function; `entry` is the symbol a call names (without '@').
struct LinkedFunction {
  std::string entry;
  std::string text;
  std::vector<TensorType> argument_types;
  std::vector<TensorType> result_types;
};

// Handle to one SSA value of a FunctionBuilder. Cheap to copy; only valid while its builder is
// alive. A default-constructed Value is invalid and rejected by every op.
class Value {
 public:
  Value() = default;

  bool valid() const { return owner_ != nullptr; }
  // Index of the value inside its builder (arguments, op results and region arguments alike).
  int id() const { return id_; }
  const TensorType& type() const;
  ElementType element_type() const { return type().element_type; }
  const std::vector<int64_t>& dims() const { return type().dims; }
  int64_t rank() const { return type().rank(); }

 private:
  friend class FunctionBuilder;
  Value(const FunctionBuilder* owner, uint64_t serial, int id, const TensorType* type)
      : owner_(owner), serial_(serial), id_(id), type_(type) {}

  const FunctionBuilder* owner_ = nullptr;
  // Serial number of the owning builder: region builders live on the stack, so a later one may
  // reuse the address of an earlier one, and a stale Value must still be told apart.
  uint64_t serial_ = 0;
  int id_ = -1;
  const TensorType* type_ = nullptr;
};

class FunctionBuilder {
 public:
  enum class ComparisonDirection { kEq, kNe, kLt, kLe, kGt, kGe };
  enum class RngAlgorithm { kDefault, kThreeFry, kPhilox };
  // Matmul precision hint; on TPU kDefault lets f32 dots run as single-pass bf16.
  enum class Precision { kDefault, kHigh, kHighest };

  struct DotDimensions {
    std::vector<int64_t> lhs_batch, rhs_batch, lhs_contracting, rhs_contracting;
  };

  // Dimension numbers of stablehlo.gather, named as in the spec. Empty batching lists mean no
  // batching dims; index_vector_dim == rank(start_indices) means an implicit trailing index
  // vector of size 1.
  struct GatherDimensions {
    std::vector<int64_t> offset_dims, collapsed_slice_dims, operand_batching_dims,
        start_indices_batching_dims, start_index_map;
    int64_t index_vector_dim = 0;
  };
  // Dimension numbers of stablehlo.scatter, named as in the spec (same conventions as gather).
  struct ScatterDimensions {
    std::vector<int64_t> update_window_dims, inserted_window_dims, input_batching_dims,
        scatter_indices_batching_dims, scatter_dims_to_operand_dims;
    int64_t index_vector_dim = 0;
  };

  // Builds the body of a region (reduce, sort, ...) on a fresh nested builder. `args` are the
  // region's scalar block arguments; the callback returns the values the region yields. Values of
  // the enclosing builder cannot be used inside the body (regions are built isolated).
  using RegionBody =
      std::function<std::vector<Value>(FunctionBuilder& body, std::span<const Value> args)>;

  // Top-level function builder; Module creates these.
  FunctionBuilder();
  ~FunctionBuilder();
  // Values point back at their builder, so the builder must stay where it is.
  FunctionBuilder(const FunctionBuilder&) = delete;
  FunctionBuilder& operator=(const FunctionBuilder&) = delete;

  // Appends a function argument. Allowed at any time before Return: arguments are named
  // %arg<i> independently of op results, so interleaving them with ops does not change the text.
  // Not allowed on region builders (their arguments are fixed by the enclosing op).
  Value Argument(TensorType type);

  // ---- Constants -------------------------------------------------------------------------------
  // Splat constant. Floats are rounded to the element type (round-to-nearest-even) and printed so
  // they parse back bit-exactly; non-finite values and -0.0 use the hex bit-pattern form. Integer
  // types require an integral, in-range value. pred: 0 is false, anything else true.
  Value Constant(ElementType type, double value, std::vector<int64_t> dims = {});
  // Exact 64-bit integer splat (range-checked for the element type; floats are rounded).
  Value ConstantInt(ElementType type, int64_t value, std::vector<int64_t> dims = {});
  // For unsigned values above INT64_MAX (e.g. ui64 bit masks).
  Value ConstantUnsigned(ElementType type, uint64_t value, std::vector<int64_t> dims = {});
  // Non-splat constants, values in row-major order; same per-element rules as above.
  Value ConstantDense(TensorType type, std::span<const double> values);
  Value ConstantDenseInt(TensorType type, std::span<const int64_t> values);
  // Integer or float tensor counting 0, 1, ... along `iota_dimension`.
  Value Iota(TensorType type, int64_t iota_dimension);

  // ---- Elementwise binary: operands must have identical types (no implicit broadcasting) ------
  Value Add(Value lhs, Value rhs);
  Value Subtract(Value lhs, Value rhs);
  Value Multiply(Value lhs, Value rhs);
  Value Divide(Value lhs, Value rhs);
  Value Remainder(Value lhs, Value rhs);
  Value Maximum(Value lhs, Value rhs);
  Value Minimum(Value lhs, Value rhs);
  Value Power(Value lhs, Value rhs);
  Value Atan2(Value lhs, Value rhs);
  Value And(Value lhs, Value rhs);
  Value Or(Value lhs, Value rhs);
  Value Xor(Value lhs, Value rhs);
  Value ShiftLeft(Value lhs, Value rhs);
  Value ShiftRightArithmetic(Value lhs, Value rhs);
  Value ShiftRightLogical(Value lhs, Value rhs);

  // ---- Elementwise unary ----------------------------------------------------------------------
  Value Negate(Value operand);
  Value Abs(Value operand);
  Value Exp(Value operand);
  Value Expm1(Value operand);
  Value Log(Value operand);
  Value Log1p(Value operand);
  Value Sqrt(Value operand);
  Value Rsqrt(Value operand);
  Value Cbrt(Value operand);
  Value Tanh(Value operand);
  Value Logistic(Value operand);
  Value Sine(Value operand);
  Value Cosine(Value operand);
  Value Tan(Value operand);
  Value Floor(Value operand);
  Value Ceil(Value operand);
  Value RoundNearestEven(Value operand);
  Value RoundNearestAfz(Value operand);
  Value Sign(Value operand);
  Value Not(Value operand);
  Value IsFinite(Value operand);  // result is pred
  // Float functions StableHLO lacks, from the CHLO dialect that XLA's PJRT plugins expand
  // during compilation (JAX emits the same ops).
  Value Erf(Value operand);
  Value ErfInv(Value operand);
  Value Lgamma(Value operand);
  Value Digamma(Value operand);
  Value Asin(Value operand);
  Value Acos(Value operand);
  Value Atan(Value operand);
  Value Sinh(Value operand);
  Value Cosh(Value operand);
  Value Asinh(Value operand);
  Value Acosh(Value operand);
  Value Atanh(Value operand);
  Value PopulationCount(Value operand);
  Value CountLeadingZeros(Value operand);

  // min/max are scalars or operand-shaped, with the operand's element type.
  Value Clamp(Value min, Value operand, Value max);
  // Result is pred. Float operands compare with FLOAT semantics unless `total_order` asks for
  // TOTALORDER (which orders NaNs and signed zeros); the flag is rejected for non-floats.
  Value Compare(Value lhs, Value rhs, ComparisonDirection direction, bool total_order = false);
  // `pred` is a pred scalar or has on_true's dims; on_true and on_false have identical types.
  Value Select(Value pred, Value on_true, Value on_false);

  // ---- Conversions and shape manipulation -----------------------------------------------------
  Value Convert(Value operand, ElementType type);
  // The operand unchanged, but opaque to the compiler's simplifications: a constant behind it is
  // not folded into the ops that use it (XLA turns a division by a constant into a
  // multiplication by its rounded reciprocal, which is not the division's correctly rounded
  // result).
  Value OptimizationBarrier(Value operand);
  // The operands unchanged, all available only once every one of them is: work on the results
  // cannot be scheduled before the last operand is computed (a backward's recomputation, which
  // would otherwise be hoisted ahead and keep its temporaries alive for longer).
  std::vector<Value> OptimizationBarrier(const std::vector<Value>& operands);
  // Reinterprets bits. Same width: same dims. Wider to narrower: a trailing dimension of size
  // width ratio is appended (f32[n] -> ui8[n, 4]). Narrower to wider: the operand's last
  // dimension must equal the ratio and is removed (ui8[n, 4] -> f32[n]). pred only to pred.
  Value BitcastConvert(Value operand, ElementType type);
  Value BroadcastInDim(Value operand, std::vector<int64_t> result_dims,
                       std::vector<int64_t> broadcast_dimensions);
  Value Reshape(Value operand, std::vector<int64_t> dims);
  Value Transpose(Value operand, std::vector<int64_t> permutation);
  Value Slice(Value operand, std::vector<int64_t> start, std::vector<int64_t> limit,
              std::vector<int64_t> strides);
  // start_indices: one integer scalar per operand dimension, all of the same type.
  Value DynamicSlice(Value operand, std::vector<Value> start_indices,
                     std::vector<int64_t> slice_sizes);
  Value DynamicUpdateSlice(Value operand, Value update, std::vector<Value> start_indices);
  Value Concatenate(std::vector<Value> inputs, int64_t dimension);
  // padding_value is a scalar of the operand's element type; low/high may be negative.
  Value Pad(Value operand, Value padding_value, std::vector<int64_t> low, std::vector<int64_t> high,
            std::vector<int64_t> interior);
  Value Reverse(Value operand, std::vector<int64_t> dimensions);

  // Result dims: batch dims, then lhs free dims, then rhs free dims (each in operand order).
  // lhs and rhs must share an element type; the result type defaults to it.
  Value DotGeneral(Value lhs, Value rhs, const DotDimensions& dimensions,
                   std::optional<ElementType> result_type = {},
                   Precision precision = Precision::kDefault);

  // ---- Linear algebra ---------------------------------------------------------------------------
  // Cholesky factor of each matrix in the trailing two (square) dims of a float operand; only the
  // `lower` (or upper) triangle is read and meaningful in the result. Matrices that are not
  // positive definite give unspecified values (callers test the factor's diagonal).
  Value Cholesky(Value a, bool lower);
  enum class TransposeA { kNoTranspose, kTranspose, kAdjoint };
  // Solves op(a) x = b (left_side) or x op(a) = b for triangular a; a is [..., m, m], b is
  // [..., m, n] (left) or [..., n, m] (right) with the same batch dims and element type.
  Value TriangularSolve(Value a, Value b, bool left_side, bool lower, bool unit_diagonal,
                        TransposeA transpose_a);

  // ---- Complex numbers and FFT -----------------------------------------------------------------
  // Real and imaginary parts of a complex operand (f32 parts for complex<f32>).
  Value Real(Value operand);
  Value Imag(Value operand);
  // Complex numbers from real and imaginary parts of identical f32 or f64 types.
  Value Complex(Value real, Value imag);
  enum class FftType { kFft, kIfft, kRfft, kIrfft };
  // Transform over the trailing fft_length.size() (1 to 3) dims. FFT/IFFT: complex in and out,
  // trailing dims equal to fft_length. RFFT: real in (trailing dims = fft_length), complex out
  // whose last dim is fft_length.back() / 2 + 1. IRFFT: the reverse. IFFT and IRFFT scale by
  // 1 / prod(fft_length).
  Value Fft(Value operand, FftType type, std::vector<int64_t> fft_length);

  // ---- Gather / scatter ------------------------------------------------------------------------
  // General gather (spec semantics; out-of-range start indices are clamped). Result dims: the
  // start_indices dims except index_vector_dim (batch dims), interleaved with slice_sizes minus
  // collapsed_slice_dims and operand_batching_dims (offset dims) at the offset_dims positions.
  Value Gather(Value operand, Value start_indices, const GatherDimensions& dimensions,
               std::vector<int64_t> slice_sizes, bool indices_are_sorted = false);
  // General scatter: results have the inputs' types. inputs share dims, updates share dims and
  // have the inputs' element types. The body gets (current_0..current_{N-1}, update_0..
  // update_{N-1}) scalars and returns N combined scalars; an empty body replaces (returns the
  // updates). Updates whose window falls outside the input are skipped (spec semantics).
  std::vector<Value> Scatter(std::vector<Value> inputs, Value scatter_indices,
                             std::vector<Value> updates, const ScatterDimensions& dimensions,
                             const RegionBody& body, bool indices_are_sorted = false,
                             bool unique_indices = false);
  // result[i...] = operand[indices[i...]] for a rank-1 operand and integer indices of any shape
  // (result dims = indices dims). Out-of-range indices are clamped into the operand.
  Value Gather1D(Value operand, Value indices);
  // Returns operand with operand[indices[i...]] = updates[i...]; updates have the indices' dims
  // and the operand's element type. Out-of-range indices are skipped; with repeated indices which
  // update wins is unspecified.
  Value Scatter1D(Value operand, Value indices, Value updates);

  // Which dimension of each operand plays which role (any permutation, e.g. NCHW/OIHW).
  struct ConvolutionDimensions {
    int64_t input_batch = 0, input_feature = 1;
    std::vector<int64_t> input_spatial;
    int64_t kernel_output_feature = 0, kernel_input_feature = 1;
    std::vector<int64_t> kernel_spatial;
    int64_t output_batch = 0, output_feature = 1;
    std::vector<int64_t> output_spatial;
  };
  // Empty strides/dilations default to 1 and empty padding to 0; padding is one (low, high) pair
  // per spatial dimension and may be negative. lhs and rhs share an element type; the result type
  // defaults to it (a wider one accumulates in that type, as DotGeneral's).
  Value Convolution(Value lhs, Value rhs, const ConvolutionDimensions& dimensions,
                    std::vector<int64_t> window_strides,
                    std::vector<std::pair<int64_t, int64_t>> padding,
                    std::vector<int64_t> lhs_dilation, std::vector<int64_t> rhs_dilation,
                    int64_t feature_group_count = 1, int64_t batch_group_count = 1,
                    Precision precision = Precision::kDefault,
                    std::optional<ElementType> result_type = {});

  // ---- Ops with regions -----------------------------------------------------------------------
  // inputs share dims; init_values are scalars of the inputs' element types. The body gets
  // (acc_0..acc_{N-1}, elem_0..elem_{N-1}) and returns N scalars of the accumulator types.
  std::vector<Value> Reduce(std::vector<Value> inputs, std::vector<Value> init_values,
                            std::vector<int64_t> dimensions, const RegionBody& body);
  // Windowed reduction (pooling). Empty strides/dilations default to 1, empty padding to 0;
  // padding holds one (low, high) pair per dimension.
  std::vector<Value> ReduceWindow(std::vector<Value> inputs, std::vector<Value> init_values,
                                  std::vector<int64_t> window_dimensions,
                                  std::vector<int64_t> window_strides,
                                  std::vector<int64_t> base_dilations,
                                  std::vector<int64_t> window_dilations,
                                  std::vector<std::pair<int64_t, int64_t>> padding,
                                  const RegionBody& body);
  // inputs share dims. The comparator gets (lhs_0, rhs_0, lhs_1, rhs_1, ...) and returns one pred
  // scalar: true when lhs sorts before rhs.
  std::vector<Value> Sort(std::vector<Value> inputs, int64_t dimension, bool is_stable,
                          const RegionBody& comparator);
  // stablehlo.while: both regions get the loop-carried values; `condition` returns one pred
  // scalar, `body` the next values (of the same types). Returns the values after the last trip.
  // Bodies see only the carried values (regions are built isolated), so anything a body needs
  // from outside travels as a carried value.
  std::vector<Value> While(std::vector<Value> initial, const RegionBody& condition,
                           const RegionBody& body);

  // Returns (new_state, random bits). state is a rank-1 integer tensor (tensor<2xui64> for
  // THREE_FRY); output is an integer or float type.
  std::pair<Value, Value> RngBitGenerator(Value state, TensorType output,
                                          RngAlgorithm algorithm = RngAlgorithm::kDefault);

  // ---- Cross-replica collectives ---------------------------------------------------------------
  // Replica ids in groups of equal size; every replica of the program is in exactly one group.
  // Collectives without a channel handle run across replicas (num_replicas of the module).
  using ReplicaGroups = std::vector<std::vector<int64_t>>;
  // Combines `operand` across each group with `body` (two scalars in, one out); result type is
  // the operand's.
  Value AllReduce(Value operand, const ReplicaGroups& groups, const RegionBody& body);
  // Concatenates the group's operands along `dimension` in group order.
  Value AllGather(Value operand, int64_t dimension, const ReplicaGroups& groups);
  // Reduces across the group and keeps this replica's slice of `dimension` (its size must divide
  // by the group size).
  Value ReduceScatter(Value operand, int64_t dimension, const ReplicaGroups& groups,
                      const RegionBody& body);
  // Splits `split_dimension` into group-size blocks, sends block i to the group's i-th replica
  // and concatenates what arrives along `concat_dimension`.
  Value AllToAll(Value operand, int64_t split_dimension, int64_t concat_dimension,
                 const ReplicaGroups& groups);
  // Each (source, target) pair sends source's operand to target; a replica that no pair targets
  // gets zeros. Sources are distinct, targets are distinct.
  Value CollectivePermute(Value operand, const std::vector<std::pair<int64_t, int64_t>>& pairs);
  // Every replica of a group gets the operand of the group's first replica.
  Value CollectiveBroadcast(Value operand, const ReplicaGroups& groups);
  // This replica's id, a ui32 scalar.
  Value ReplicaId();

  // ---- Calls -----------------------------------------------------------------------------------
  // func.call of a linked function (top-level builders only): operands must have its argument
  // types. The function's text becomes part of the module once, however often it is called.
  std::vector<Value> Call(const std::shared_ptr<const LinkedFunction>& callee,
                          const std::vector<Value>& operands);
  // Linked functions called so far, in first-call order.
  const std::vector<std::shared_ptr<const LinkedFunction>>& linked_functions() const {
    return linked_functions_;
  }

  // Terminates the function (func.return) or region (stablehlo.return). Exactly once, last.
  void Return(std::vector<Value> results);

  // Declares that result `result_index` may reuse argument `argument_index`'s buffer (input/output
  // aliasing): when the caller donates that argument, the update happens in place. Types must
  // match; checked at Return.
  void AliasArgumentWithResult(int argument_index, int result_index);
  // Per argument, whether any returned value depends on it (after Return). Lets a caller drop
  // inputs a program only looked at for their shape.
  std::vector<bool> LiveArguments() const;
  bool returned() const { return returned_; }
  const std::vector<TensorType>& argument_types() const { return argument_types_; }
  // Only meaningful after Return.
  const std::vector<TensorType>& result_types() const { return result_types_; }

  // The func.func text for a function named `name`, indented by `indent` spaces. Requires Return.
  std::string FunctionText(std::string_view name, int indent) const;

 private:
  struct ValueInfo {
    std::string name;
    TensorType type;
    std::vector<int> operands;  // ids of the operands of the op that produced it
  };
  struct Line {
    int indent;  // in units of two spaces, relative to the function body
    std::string text;
  };
  struct Region {
    std::vector<Line> lines;  // block header at indent 0, ops at indent 1
    std::vector<TensorType> result_types;
  };
  enum class Kind { kFunction, kRegion };

  FunctionBuilder(Kind kind, std::shared_ptr<int64_t> counter);

  const ValueInfo& Check(const Value& value, std::string_view op) const;
  void CheckOpen(std::string_view op) const;
  Value NewValue(std::string name, TensorType type);
  std::string NextName();
  // Appends one op and returns its results. Attribute text goes between the braces.
  std::vector<Value> Emit(std::string_view op, const std::vector<Value>& operands,
                          const std::string& attributes, std::vector<TensorType> result_types,
                          const Region* region = nullptr);
  // The same for ops with several regions (while's condition and body).
  std::vector<Value> Emit(std::string_view op, const std::vector<Value>& operands,
                          const std::string& attributes, std::vector<TensorType> result_types,
                          const std::vector<const Region*>& regions);
  Value EmitOne(std::string_view op, const std::vector<Value>& operands,
                const std::string& attributes, TensorType result_type);
  Region BuildRegion(std::string_view op, const std::vector<TensorType>& argument_types,
                     const RegionBody& body);
  Value EmitConstant(TensorType type, std::string literal);
  Value Binary(std::string_view op, Value lhs, Value rhs, int allowed);
  Value Unary(std::string_view op, Value operand, int allowed);

  Kind kind_;
  uint64_t serial_;
  std::shared_ptr<int64_t> counter_;  // shared with nested region builders: names stay unique
  std::deque<ValueInfo> values_;      // deque: Value keeps a pointer to the type
  std::vector<Line> lines_;
  std::vector<TensorType> argument_types_;
  std::vector<int> argument_aliases_;  // per argument: aliased result index, or -1
  std::vector<int> argument_value_ids_;
  std::vector<int> returned_ids_;
  std::vector<TensorType> result_types_;
  std::vector<Value> region_arguments_;
  bool returned_ = false;
  std::vector<std::shared_ptr<const LinkedFunction>> linked_functions_;
};

}  // namespace torch_tpu::stablehlo
