// Pieces shared by the linear-algebra lowerings: input checks with CPU's wording, and batched
// matrix helpers on a FunctionBuilder (usable inside loop bodies, which get their own builder).
//
// The iterative factorizations work on matrices flattened to [batch, rows, columns]; a trip index
// (s32 scalar) selects the column or row being eliminated, and masks built from iotas select the
// part of the matrix a step touches (the same program for every batch element).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "lowering/context.h"
#include "stablehlo/builder.h"

namespace torch_tpu::lowering::linalg {

// CPU's LAPACK paths take float and double only (complex is not a tpu dtype).
void CheckLinalgInput(LoweringContext& context, const Operand& operand, const char* what);
void CheckSquare(LoweringContext& context, const Operand& operand, const char* what);

// How CPU words the input errors of a torch.linalg function, so that the tpu raises the same
// text: `function` leads its RuntimeErrors ("linalg.det"); a dtype that passes its checks and
// reaches a kernel lacking it raises NotImplementedError quoting `half_kernel` /
// `integer_kernel` ("lu_cpu"), and nullptr means CPU's own check rejects that dtype first.
struct CpuLinalgNames {
  const char* function;
  const char* half_kernel = nullptr;
  const char* integer_kernel = nullptr;
};
void CheckLinalgInput(const Operand& operand, const char* what, const CpuLinalgNames& names);
void CheckSquare(const Operand& operand, const char* what, const CpuLinalgNames& names);

bool IsEmpty(const Value& value);
// The machine epsilon of a float element type (f32 or f64).
double Epsilon(ElementType type);
// Dims of all but the last two dims.
std::vector<int64_t> BatchDims(const Value& value);
// [..., m, n] -> [batch, m, n] (batch = product of the leading dims).
Value FlattenBatch(FunctionBuilder& b, Value x);
// Back from [batch, ...] to the leading dims `batch` followed by the trailing dims of x.
Value UnflattenBatch(FunctionBuilder& b, Value x, const std::vector<int64_t>& batch);

// Swaps the last two dims.
Value MatrixTranspose(FunctionBuilder& b, Value x);
// s32 iota over `dims` counting along `dim`.
Value IndexIota(FunctionBuilder& b, const std::vector<int64_t>& dims, int64_t dim);
// An s32 scalar broadcast to `dims`.
Value Splat(FunctionBuilder& b, Value scalar, const std::vector<int64_t>& dims);
// Keeps the entries with column - row <= offset (lower) or >= offset (upper), zeroing the rest.
Value KeepTriangle(FunctionBuilder& b, Value x, bool lower, int64_t offset = 0);
// [..., m, n] identity-like matrices (ones on the main diagonal) of x's element type.
Value Eye(FunctionBuilder& b, ElementType type, const std::vector<int64_t>& dims);
// The main diagonal of [..., m, n] as [..., min(m, n)].
Value Diagonal(FunctionBuilder& b, Value x);

// Column j of [B, m, n] as [B, m], row i as [B, n] (j, i: s32 scalars).
Value DynamicColumn(FunctionBuilder& b, Value x, Value j);
Value DynamicRow(FunctionBuilder& b, Value x, Value i);
// Entry i of each [B, k] vector as [B].
Value DynamicEntry(FunctionBuilder& b, Value x, Value i);
// Rows `rows[b, r]` of each matrix of [B, m, n]: [B, k, n] for rows [B, k] (s32).
Value GatherRows(FunctionBuilder& b, Value x, Value rows);
// u[B, m] (x) v[B, n] -> [B, m, n].
Value Outer(FunctionBuilder& b, Value u, Value v);
// The largest |x| among the `eligible` entries of each vector x [B, m] and the first index
// holding it ([B] each, the index s32): ties go to the lower index, as BLAS's i?amax, and NaNs
// never win. With no eligible entry the magnitude is -1.
std::pair<Value, Value> FirstLargestMagnitude(FunctionBuilder& b, Value x, Value eligible);
// Sum of x over `dims`.
Value Sum(FunctionBuilder& b, Value x, std::vector<int64_t> dims);
// Batched matrix product [B, m, k] x [B, k, n] at full float precision.
Value BatchMatmul(FunctionBuilder& b, Value lhs, Value rhs);
// The pred scalar "any element of x is true".
Value Any(FunctionBuilder& b, Value x);

// Broadcasts the batch dims (all but the last two) of a and b against each other.
std::pair<Value, Value> BroadcastBatch(LoweringContext& context, Value a, Value b);

// Declares the device-side check "every info is 0" with message `what` (raised at the next sync,
// or at the op in debug mode): the check_errors=True path of the _ex ops.
void CheckInfoIsZero(LoweringContext& context, Value info, const std::string& what);

}  // namespace torch_tpu::lowering::linalg
