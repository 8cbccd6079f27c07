// Eigenvalues and eigenvectors of general real matrices as StableHLO loops (no LAPACK call):
// linalg_eig and _linalg_eigvals.
//
// CPU runs LAPACK's geev, and what OpInfo compares (the eigenvalue order, the eigenvectors up to a
// phase) depends on the path it takes, so this follows that path for the small matrices it is
// used on: gebal (isolating permutations, then scaling by powers of 2), gehd2 (Householder
// Hessenberg reduction with larfg's sign convention) with the orthogonal factor accumulated as
// orghr forms it, lahqr (Francis double-shift QR: the Ahues-Tisseur deflation test, exceptional
// shifts every 10th and 20th iteration without deflation, lanv2 standardizing the 2x2 blocks),
// then trevc's back substitution on the quasi-triangular Schur factor (one complex column per
// eigenvalue, a 2x2 diagonal block solved as one complex system), gebak, and geev's normalization
// (unit 2-norm, a complex vector rotated so that its largest component is real).
//
// The iterations a matrix needs depend on its values, so the batch is a loop over its matrices
// and every stage works on one [n, n] matrix with scalar loop state, as LAPACK does; entries are
// read and written through dynamic slices, and masks built from iotas pick the rows and columns a
// step touches. The rescaling against overflow of geev, larfg, lanv2 and trevc (for matrices near
// the ends of the floating-point range) is not reproduced.
#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include "lowering/context.h"
#include "lowering/linalg_common.h"
#include "stablehlo/loops.h"

namespace torch_tpu::lowering::linalg {
namespace {

using Values = std::vector<Value>;
constexpr ElementType kS32 = ElementType::kS32;

// Scalar and single-matrix arithmetic on one builder (every loop region has its own).
struct Ops {
  FunctionBuilder& b;
  ElementType type;  // f32 or f64, the precision LAPACK's s/d routine would run in
  int64_t n;

  Value F(double value) const { return b.Constant(type, value); }
  Value I(int64_t value) const { return b.ConstantInt(kS32, value); }
  Value Eq(Value x, Value y) const { return b.Compare(x, y, Direction::kEq); }
  Value Ne(Value x, Value y) const { return b.Compare(x, y, Direction::kNe); }
  Value Lt(Value x, Value y) const { return b.Compare(x, y, Direction::kLt); }
  Value Le(Value x, Value y) const { return b.Compare(x, y, Direction::kLe); }
  Value Gt(Value x, Value y) const { return b.Compare(x, y, Direction::kGt); }
  Value Ge(Value x, Value y) const { return b.Compare(x, y, Direction::kGe); }
  Value And(Value x, Value y) const { return b.And(x, y); }
  Value Or(Value x, Value y) const { return b.Or(x, y); }
  Value Not(Value x) const { return b.Not(x); }
  Value If(Value pred, Value x, Value y) const { return b.Select(pred, x, y); }
  Value Abs(Value x) const { return b.Abs(x); }
  Value Add(Value x, Value y) const { return b.Add(x, y); }
  Value Sub(Value x, Value y) const { return b.Subtract(x, y); }
  Value Mul(Value x, Value y) const { return b.Multiply(x, y); }
  Value Div(Value x, Value y) const { return b.Divide(x, y); }
  Value Max(Value x, Value y) const { return b.Maximum(x, y); }
  Value Min(Value x, Value y) const { return b.Minimum(x, y); }
  Value Sqrt(Value x) const { return b.Sqrt(x); }
  Value Plus(Value i, int64_t offset) const { return b.Add(i, I(offset)); }
  Value Spread(Value scalar, const std::vector<int64_t>& dims) const {
    return b.BroadcastInDim(scalar, dims, {});
  }

  // Entry (i, j) of the matrix h as a 0-d value; out-of-range indices clamp, so callers read
  // there only what they mask away.
  Value At(Value h, Value i, Value j) const {
    return b.Reshape(b.DynamicSlice(h, {i, j}, {1, 1}), {});
  }
  Value Put(Value h, Value i, Value j, Value value) const {
    return b.DynamicUpdateSlice(h, b.Reshape(value, {1, 1}), {i, j});
  }
  Value Entry(Value v, Value i) const { return b.Reshape(b.DynamicSlice(v, {i}, {1}), {}); }
  Value SetEntry(Value v, Value i, Value value) const {
    return b.DynamicUpdateSlice(v, b.Reshape(value, {1}), {i});
  }
  Value Row(Value h, Value i) const {
    return b.Reshape(b.DynamicSlice(h, {i, I(0)}, {1, n}), {n});
  }
  Value Column(Value h, Value j) const {
    return b.Reshape(b.DynamicSlice(h, {I(0), j}, {n, 1}), {n});
  }
  // Iotas over a vector, and over the rows and columns of a matrix.
  Value Positions() const { return IndexIota(b, {n}, 0); }
  Value Rows() const { return IndexIota(b, {n, n}, 0); }
  Value Columns() const { return IndexIota(b, {n, n}, 1); }
  Value Versus(Value iota, Value i, Direction direction) const {
    return b.Compare(iota, Spread(i, iota.dims()), direction);
  }
  // A vector as every column ([n] indexed by row) or every row ([n] indexed by column).
  Value AsColumns(Value v) const { return b.BroadcastInDim(v, {n, n}, {0}); }
  Value AsRows(Value v) const { return b.BroadcastInDim(v, {n, n}, {1}); }
  Value Zeros(const std::vector<int64_t>& dims) const { return b.Constant(type, 0.0, dims); }
  Value Keep(Value mask, Value x) const { return b.Select(mask, x, Zeros(x.dims())); }
  Value SumAll(Value v) const { return Sum(b, v, {0}); }
  Value MaxAll(Value v) const {
    return b.Reduce({v}, {b.Constant(v.element_type(), -std::numeric_limits<double>::infinity())},
                    {0}, [](FunctionBuilder& body, std::span<const Value> args) {
                      return Values{body.Maximum(args[0], args[1])};
                    })[0];
  }
  Value MaxIndex(Value v) const {
    return b.Reduce({v}, {I(std::numeric_limits<int32_t>::min())}, {0},
                    [](FunctionBuilder& body, std::span<const Value> args) {
                      return Values{body.Maximum(args[0], args[1])};
                    })[0];
  }
  Value Norm(Value v) const { return Sqrt(SumAll(Mul(v, v))); }
  // h v and v^T h at full precision.
  Value MatVec(Value h, Value v) const {
    return b.DotGeneral(h, v, {{}, {}, {1}, {0}}, std::nullopt,
                        FunctionBuilder::Precision::kHighest);
  }
  Value VecMat(Value v, Value h) const {
    return b.DotGeneral(v, h, {{}, {}, {0}, {0}}, std::nullopt,
                        FunctionBuilder::Precision::kHighest);
  }
  Value MatMul(Value x, Value y) const {
    return b.DotGeneral(x, y, {{}, {}, {1}, {0}}, std::nullopt,
                        FunctionBuilder::Precision::kHighest);
  }
  Value OuterProduct(Value u, Value v) const { return Mul(AsColumns(u), AsRows(v)); }
  // Fortran's SIGN(a, b): |a| with the sign of b.
  Value Sign(Value a, Value sign) const {
    return If(Ge(sign, Zeros(sign.dims())), Abs(a), b.Negate(Abs(a)));
  }
  // dlapy2: sqrt(x^2 + y^2) without needless overflow.
  Value Hypot(Value x, Value y) const {
    Value w = Max(Abs(x), Abs(y)), z = Min(Abs(x), Abs(y));
    Value ratio = Div(z, w);
    Value one = b.Constant(type, 1.0, x.dims());
    return If(Eq(w, Zeros(x.dims())), z, Mul(w, Sqrt(Add(one, Mul(ratio, ratio)))));
  }
  // Columns i and j swapped in rows <= row_limit, and rows i and j in columns >= column_start.
  Value SwapColumns(Value h, Value i, Value j, Value row_limit) const {
    Value rows = Versus(Rows(), row_limit, Direction::kLe);
    Value columns = Columns();
    Value ci = AsColumns(Column(h, i)), cj = AsColumns(Column(h, j));
    h = If(And(rows, Versus(columns, i, Direction::kEq)), cj, h);
    return If(And(rows, Versus(columns, j, Direction::kEq)), ci, h);
  }
  Value SwapRows(Value h, Value i, Value j, Value column_start) const {
    Value columns = Versus(Columns(), column_start, Direction::kGe);
    Value rows = Rows();
    Value ri = AsRows(Row(h, i)), rj = AsRows(Row(h, j));
    h = If(And(columns, Versus(rows, i, Direction::kEq)), rj, h);
    return If(And(columns, Versus(rows, j, Direction::kEq)), ri, h);
  }
  // h[k, k - 1] and h[k - 1, k] at k (zero at k = 0), for n >= 2.
  Value SubDiagonal(Value h) const {
    return b.Pad(Diagonal(b, b.Slice(h, {1, 0}, {n, n - 1}, {1, 1})), F(0.0), {1}, {0}, {0});
  }
  Value SuperDiagonal(Value h) const {
    return b.Pad(Diagonal(b, b.Slice(h, {0, 1}, {n - 1, n}, {1, 1})), F(0.0), {1}, {0}, {0});
  }
  // w[k] = v[k - by], zero where k - by is out of range.
  Value Shifted(Value v, int64_t by) const { return b.Pad(v, F(0.0), {by}, {-by}, {0}); }
  double Ulp() const { return Epsilon(type); }
  double SafeMinimum() const {
    return type == ElementType::kF64 ? std::numeric_limits<double>::min()
                                     : std::numeric_limits<float>::min();
  }
};

Value Pred(FunctionBuilder& b, bool value) {
  return b.Compare(b.ConstantInt(kS32, 0), b.ConstantInt(kS32, value ? 0 : 1), Direction::kEq);
}

// ---- gebal ----------------------------------------------------------------------------------

// The two isolating searches of gebal. State: a, perm (s32 [n]: gebal's SCALE entries outside
// ilo..ihi), k, l, done (the whole matrix isolated: ilo = ihi = 0).
struct Balanced {
  Value a, perm, scale, lo, hi;
};

Balanced Balance(FunctionBuilder& b, Value a) {
  const ElementType type = a.element_type();
  const int64_t n = a.dims()[0];
  Ops o{b, type, n};
  Value perm = IndexIota(b, {n}, 0);
  // Rows with no off-diagonal nonzero in columns 0..l go to the bottom (row l), l shrinks.
  Values rows = b.While(
      {a, perm, o.I(n - 1), Pred(b, true), Pred(b, false)},
      [](FunctionBuilder& b, std::span<const Value> s) { return Values{b.And(s[3], b.Not(s[4]))}; },
      [n, type](FunctionBuilder& b, std::span<const Value> s) {
        Values sweep = stablehlo::ForLoop(
            b, 0, n, {s[0], s[1], s[2], Pred(b, false), s[4], s[2]},
            [n, type](FunctionBuilder& b, Value t, std::span<const Value> c) {
              Ops o{b, type, n};
              Value a = c[0], perm = c[1], l = c[2], noconv = c[3], done = c[4];
              Value i = o.Sub(c[5], t);
              Value ic = o.Max(i, o.I(0));
              Value positions = o.Positions();
              Value off = o.And(o.Versus(positions, l, Direction::kLe),
                                o.Versus(positions, ic, Direction::kNe));
              Value nonzero = o.And(off, o.Ne(o.Row(a, ic), o.Zeros({n})));
              Value swap = o.And(o.And(o.Ge(i, o.I(0)), o.Not(done)), o.Not(Any(b, nonzero)));
              Value swapped = o.SwapRows(o.SwapColumns(a, ic, l, l), ic, l, o.I(0));
              a = o.If(swap, swapped, a);
              perm = o.If(swap, o.SetEntry(perm, l, ic), perm);
              Value last = o.Eq(l, o.I(0));
              done = o.Or(done, o.And(swap, last));
              l = o.If(o.And(swap, o.Not(last)), o.Plus(l, -1), l);
              return Values{a, perm, l, o.Or(noconv, swap), done, c[5]};
            });
        return Values{sweep[0], sweep[1], sweep[2], sweep[3], sweep[4]};
      });
  Value l = rows[2], done = rows[4];
  // Columns with no off-diagonal nonzero in rows k..l go to the left (column k), k grows.
  Values columns = b.While(
      {rows[0], rows[1], o.I(0), Pred(b, true), done, l},
      [](FunctionBuilder& b, std::span<const Value> s) { return Values{b.And(s[3], b.Not(s[4]))}; },
      [n, type](FunctionBuilder& b, std::span<const Value> s) {
        Values sweep = stablehlo::ForLoop(
            b, 0, n, {s[0], s[1], s[2], Pred(b, false), s[5], s[2]},
            [n, type](FunctionBuilder& b, Value t, std::span<const Value> c) {
              Ops o{b, type, n};
              Value a = c[0], perm = c[1], k = c[2], l = c[4];
              Value j = o.Add(c[5], t);
              Value jc = o.Min(j, o.I(n - 1));
              Value positions = o.Positions();
              Value off = o.And(o.And(o.Versus(positions, k, Direction::kGe),
                                      o.Versus(positions, l, Direction::kLe)),
                                o.Versus(positions, jc, Direction::kNe));
              Value nonzero = o.And(off, o.Ne(o.Column(a, jc), o.Zeros({n})));
              Value swap = o.And(o.Le(j, l), o.Not(Any(b, nonzero)));
              Value swapped = o.SwapRows(o.SwapColumns(a, jc, k, l), jc, k, k);
              a = o.If(swap, swapped, a);
              perm = o.If(swap, o.SetEntry(perm, k, jc), perm);
              k = o.If(swap, o.Plus(k, 1), k);
              return Values{a, perm, k, o.Or(c[3], swap), l, c[5]};
            });
        return Values{sweep[0], sweep[1], sweep[2], sweep[3], s[4], s[5]};
      });
  a = columns[0];
  perm = columns[1];
  Value k = b.Select(done, o.I(0), columns[2]);

  // Scaling of rows and columns k..l by powers of 2 until their norms are within 0.95 of balance.
  const double sfmin1 = o.SafeMinimum() / o.Ulp(), sfmax1 = 1.0 / sfmin1;
  const double sfmin2 = sfmin1 * 2.0, sfmax2 = 1.0 / sfmin2;
  Value scale = b.Constant(type, 1.0, {n});
  Values scaled = b.While(
      {a, scale, k, l, b.Not(done)},
      [](FunctionBuilder& b, std::span<const Value> s) { return Values{s[4]}; },
      [=](FunctionBuilder& b, std::span<const Value> s) {
        Values sweep = stablehlo::ForLoop(
            b, 0, n, {s[0], s[1], s[2], s[3], Pred(b, false)},
            [=](FunctionBuilder& b, Value i, std::span<const Value> c) {
              Ops o{b, type, n};
              Value a = c[0], scale = c[1], k = c[2], l = c[3];
              Value positions = o.Positions();
              Value inside = o.And(o.Versus(positions, k, Direction::kGe),
                                   o.Versus(positions, l, Direction::kLe));
              Value column = o.Column(a, i), row = o.Row(a, i);
              Value cn = o.Norm(o.Keep(inside, column)), rn = o.Norm(o.Keep(inside, row));
              Value ca = o.MaxAll(o.Abs(o.Keep(o.Versus(positions, l, Direction::kLe), column)));
              Value ra = o.MaxAll(o.Abs(o.Keep(o.Versus(positions, k, Direction::kGe), row)));
              Value active = o.And(o.Ge(i, k), o.Le(i, l));
              // gebal gives up on NaNs; the input is finite here, but sums may overflow.
              Value sum = o.Add(o.Add(o.Add(cn, ca), rn), ra);
              Value skip = o.Or(o.Or(o.Eq(cn, o.F(0.0)), o.Eq(rn, o.F(0.0))), o.Ne(sum, sum));
              Value s_sum = o.Add(cn, rn);
              // Up: f, c, ca grow by 2 while c < r / 2 (and within range).
              Values up = b.While(
                  {o.F(1.0), cn, ca, rn, o.Div(rn, o.F(2.0)), ra},
                  [=](FunctionBuilder& b, std::span<const Value> v) {
                    Ops o{b, type, n};
                    Value big = o.Max(o.Max(v[0], v[1]), v[2]);
                    Value small = o.Min(o.Min(v[3], v[4]), v[5]);
                    return Values{o.And(o.And(o.Lt(v[1], v[4]), o.Lt(big, o.F(sfmax2))),
                                        o.Gt(small, o.F(sfmin2)))};
                  },
                  [=](FunctionBuilder& b, std::span<const Value> v) {
                    Ops o{b, type, n};
                    Value two = o.F(2.0);
                    return Values{o.Mul(v[0], two), o.Mul(v[1], two), o.Mul(v[2], two),
                                  o.Div(v[3], two), o.Div(v[4], two), o.Div(v[5], two)};
                  });
              // Down: f, c, ca shrink by 2 while c / 2 >= r.
              Values down = b.While(
                  {up[0], up[1], o.Div(up[1], o.F(2.0)), up[2], up[3], up[5]},
                  [=](FunctionBuilder& b, std::span<const Value> v) {
                    Ops o{b, type, n};
                    Value big = o.Max(v[4], v[5]);
                    Value small = o.Min(o.Min(v[0], v[1]), o.Min(v[2], v[3]));
                    return Values{o.And(o.And(o.Ge(v[2], v[4]), o.Lt(big, o.F(sfmax2))),
                                        o.Gt(small, o.F(sfmin2)))};
                  },
                  [=](FunctionBuilder& b, std::span<const Value> v) {
                    Ops o{b, type, n};
                    Value two = o.F(2.0);
                    return Values{o.Div(v[0], two), o.Div(v[1], two), o.Div(v[2], two),
                                  o.Div(v[3], two), o.Mul(v[4], two), o.Mul(v[5], two)};
                  });
              Value f = down[0], cf = down[1], rf = down[4];
              Value si = o.Entry(scale, i);
              skip = o.Or(skip, o.Ge(o.Add(cf, rf), o.Mul(o.F(0.95), s_sum)));
              skip = o.Or(skip, o.And(o.And(o.Lt(f, o.F(1.0)), o.Lt(si, o.F(1.0))),
                                      o.Le(o.Mul(f, si), o.F(sfmin1))));
              skip = o.Or(skip, o.And(o.And(o.Gt(f, o.F(1.0)), o.Gt(si, o.F(1.0))),
                                      o.Ge(si, o.Div(o.F(sfmax1), f))));
              Value apply = o.And(active, o.Not(skip));
              Value g = o.Div(o.F(1.0), f);
              Value rows = o.Rows(), columns = o.Columns();
              Value in_row = o.And(o.Versus(rows, i, Direction::kEq),
                                   o.Versus(columns, k, Direction::kGe));
              Value in_column = o.And(o.Versus(columns, i, Direction::kEq),
                                      o.Versus(rows, l, Direction::kLe));
              Value next = o.If(in_row, o.Mul(a, o.Spread(g, {n, n})), a);
              next = o.If(in_column, o.Mul(next, o.Spread(f, {n, n})), next);
              return Values{o.If(apply, next, a),
                            o.If(apply, o.SetEntry(scale, i, o.Mul(si, f)), scale), k, l,
                            o.Or(c[4], apply)};
            });
        return sweep;
      });
  return {scaled[0], perm, scaled[1], k, l};
}

// ---- gehd2 + orghr --------------------------------------------------------------------------

// Reduces a to upper Hessenberg form in rows and columns lo..hi; returns (H, Q) with
// A = Q H Q^T, Q the product of the reflectors H(lo) ... H(hi - 1).
std::pair<Value, Value> Hessenberg(FunctionBuilder& b, Value a, Value lo, Value hi) {
  const ElementType type = a.element_type();
  const int64_t n = a.dims()[0];
  Value q = Eye(b, type, {n, n});
  if (n < 2) return {a, q};
  Values out = stablehlo::ForLoop(
      b, 0, n - 1, {a, q, lo, hi}, [=](FunctionBuilder& b, Value i, std::span<const Value> c) {
        Ops o{b, type, n};
        Value a = c[0], q = c[1], lo = c[2], hi = c[3];
        Value active = o.And(o.Ge(i, lo), o.Lt(i, hi));
        Value i1 = o.Plus(i, 1);
        Value positions = o.Positions();
        Value below = o.And(o.Versus(positions, o.Plus(i, 2), Direction::kGe),
                            o.Versus(positions, hi, Direction::kLe));
        Value alpha = o.At(a, i1, i);
        Value x = o.Keep(below, o.Column(a, i));
        Value xnorm = o.Norm(x);
        // larfg: H = I - tau v v^T with v(i + 1) = 1 maps (alpha, x) to (beta, 0).
        Value beta = b.Negate(o.Sign(o.Hypot(alpha, xnorm), alpha));
        Value trivial = o.Or(o.Eq(xnorm, o.F(0.0)), o.Not(active));
        Value tau = o.If(trivial, o.F(0.0), o.Div(o.Sub(beta, alpha), beta));
        Value v = o.Mul(x, o.Spread(o.Div(o.F(1.0), o.Sub(alpha, beta)), {n}));
        v = o.If(o.Versus(positions, i1, Direction::kEq), b.Constant(type, 1.0, {n}), v);
        v = o.If(trivial, o.Zeros({n}), v);
        Value taun = o.Spread(tau, {n, n});
        Value rows_to_hi = o.Versus(o.Rows(), hi, Direction::kLe);
        // From the right on rows 0..hi, then from the left on columns i + 1..n - 1.
        a = o.If(rows_to_hi, o.Sub(a, o.Mul(taun, o.OuterProduct(o.MatVec(a, v), v))), a);
        Value right_of_i = o.Versus(o.Columns(), i1, Direction::kGe);
        a = o.If(right_of_i, o.Sub(a, o.Mul(taun, o.OuterProduct(v, o.VecMat(v, a)))), a);
        q = o.Sub(q, o.Mul(taun, o.OuterProduct(o.MatVec(q, v), v)));
        // Column i below the subdiagonal is zero now; the subdiagonal entry is beta.
        Value in_column = o.Versus(o.Columns(), i, Direction::kEq);
        Value column =
            o.If(o.Versus(positions, i1, Direction::kEq), o.Spread(beta, {n}), o.Zeros({n}));
        Value reduced = o.If(o.And(in_column, o.Versus(o.Rows(), i1, Direction::kGe)),
                             o.AsColumns(column), a);
        a = o.If(o.Or(trivial, o.Not(active)), a, reduced);
        return Values{a, q, lo, hi};
      });
  return {out[0], out[1]};
}

// ---- lanv2 ----------------------------------------------------------------------------------

// Standardizes the 2x2 block [[a, b], [c, d]]: upper triangular when its eigenvalues are real,
// else equal diagonal entries and b c < 0. Returns (a, b, c, d, cs, sn) with the rotation
// [[cs, -sn], [sn, cs]] relating the two.
Values Lanv2(const Ops& o, Value a, Value b, Value c, Value d) {
  const Value zero = o.F(0.0), one = o.F(1.0), half = o.F(0.5);
  // General case; sqrt and division results of the other cases are selected away.
  Value temp = o.Sub(a, d);
  Value p = o.Mul(half, temp);
  Value bcmax = o.Max(o.Abs(b), o.Abs(c));
  Value bcmis =
      o.Mul(o.Mul(o.Min(o.Abs(b), o.Abs(c)), o.Sign(one, b)), o.Sign(one, c));
  Value scale = o.Max(o.Abs(p), bcmax);
  Value z = o.Add(o.Mul(o.Div(p, scale), p), o.Mul(o.Div(bcmax, scale), bcmis));
  // Real eigenvalues, well separated.
  Value zr = o.Add(p, o.Sign(o.Mul(o.Sqrt(scale), o.Sqrt(z)), p));
  Value tau_r = o.Hypot(c, zr);
  Values real = {o.Add(d, zr), o.Sub(b, c), zero, o.Sub(d, o.Mul(o.Div(bcmax, zr), bcmis)),
                 o.Div(zr, tau_r), o.Div(c, tau_r)};
  // Complex or nearly equal eigenvalues: make the diagonal entries equal.
  Value sigma = o.Add(b, c);
  Value tau = o.Hypot(sigma, temp);
  Value cs = o.Sqrt(o.Mul(half, o.Add(one, o.Div(o.Abs(sigma), tau))));
  Value sn = o.Mul(o.b.Negate(o.Div(p, o.Mul(tau, cs))), o.Sign(one, sigma));
  Value aa = o.Add(o.Mul(a, cs), o.Mul(b, sn));
  Value bb = o.Add(o.b.Negate(o.Mul(a, sn)), o.Mul(b, cs));
  Value cc = o.Add(o.Mul(c, cs), o.Mul(d, sn));
  Value dd = o.Add(o.b.Negate(o.Mul(c, sn)), o.Mul(d, cs));
  Value b2 = o.Add(o.Mul(bb, cs), o.Mul(dd, sn));
  Value c2 = o.Add(o.b.Negate(o.Mul(aa, sn)), o.Mul(cc, cs));
  Value a2 = o.Add(o.Mul(aa, cs), o.Mul(cc, sn));
  Value d2 = o.Add(o.b.Negate(o.Mul(bb, sn)), o.Mul(dd, cs));
  Value mean = o.Mul(half, o.Add(a2, d2));
  // Real after all (b and c of one sign): split into the triangular form.
  Value sab = o.Sqrt(o.Abs(b2)), sac = o.Sqrt(o.Abs(c2));
  Value pr = o.Sign(o.Mul(sab, sac), c2);
  Value taur = o.Div(one, o.Sqrt(o.Abs(o.Add(b2, c2))));
  Value cs1 = o.Mul(sab, taur), sn1 = o.Mul(sac, taur);
  Values split = {o.Add(mean, pr), o.Sub(b2, c2), zero, o.Sub(mean, pr),
                  o.Sub(o.Mul(cs, cs1), o.Mul(sn, sn1)), o.Add(o.Mul(cs, sn1), o.Mul(sn, cs1))};
  Values equal = {mean, b2, c2, mean, cs, sn};
  Values flipped = {mean, o.b.Negate(c2), zero, mean, o.b.Negate(sn), cs};
  Value c2_zero = o.Eq(c2, zero), b2_zero = o.Eq(b2, zero);
  Value same_sign = o.Eq(o.Sign(one, b2), o.Sign(one, c2));
  Values result(6);
  for (int r = 0; r < 6; ++r) {
    Value complex = o.If(c2_zero, equal[r],
                         o.If(b2_zero, flipped[r], o.If(same_sign, split[r], equal[r])));
    result[r] = o.If(o.Ge(z, o.Mul(o.F(4.0), o.F(o.Ulp()))), real[r], complex);
  }
  Values untouched = {a, b, c, d, one, zero};
  Values swapped = {d, o.b.Negate(c), zero, a, zero, one};
  Value opposite = o.And(o.Eq(o.Sub(a, d), zero), o.Ne(o.Sign(one, b), o.Sign(one, c)));
  for (int r = 0; r < 6; ++r) {
    result[r] = o.If(o.Eq(c, zero), untouched[r],
                     o.If(o.Eq(b, zero), swapped[r], o.If(opposite, untouched[r], result[r])));
  }
  return result;
}

// ---- lahqr ----------------------------------------------------------------------------------

// One bulge-chasing sweep k = m..i - 1 of a double-shift QR iteration (lahqr's loop 130), on
// H (all columns: the Schur form is wanted) and Z. v holds the first column of the shift
// polynomial, scaled.
Values Sweep(FunctionBuilder& b, Value h, Value z, Value m, Value l, Value i, Value v1, Value v2,
             Value v3, Value skip) {
  const ElementType type = h.element_type();
  const int64_t n = h.dims()[0];
  Values out = b.While(
      {h, z, m, m, l, i, v1, v2, v3, skip},
      [](FunctionBuilder& b, std::span<const Value> s) {
        return Values{b.And(b.Compare(s[2], s[5], Direction::kLt), b.Not(s[9]))};
      },
      [=](FunctionBuilder& b, std::span<const Value> s) {
        Ops o{b, type, n};
        Value h = s[0], z = s[1], k = s[2], m = s[3], l = s[4], i = s[5];
        Value three = o.Ge(o.Sub(i, k), o.I(2));  // nr = 3, else 2
        Value km1 = o.Max(o.Plus(k, -1), o.I(0));
        Value after_m = o.Gt(k, m);
        Value v1 = o.If(after_m, o.At(h, k, km1), s[6]);
        Value v2 = o.If(after_m, o.At(h, o.Plus(k, 1), km1), s[7]);
        Value v3 = o.If(after_m, o.If(three, o.At(h, o.Plus(k, 2), km1), o.F(0.0)), s[8]);
        v3 = o.If(three, v3, o.F(0.0));
        // larfg on (v1, v2[, v3]).
        Value xnorm = o.If(three, o.Sqrt(o.Add(o.Mul(v2, v2), o.Mul(v3, v3))), o.Abs(v2));
        Value beta = o.b.Negate(o.Sign(o.Hypot(v1, xnorm), v1));
        Value trivial = o.Eq(xnorm, o.F(0.0));
        Value t1 = o.If(trivial, o.F(0.0), o.Div(o.Sub(beta, v1), beta));
        Value scale = o.Div(o.F(1.0), o.Sub(v1, beta));
        v2 = o.If(trivial, v2, o.Mul(v2, scale));
        v3 = o.If(trivial, v3, o.Mul(v3, scale));
        v1 = o.If(trivial, v1, beta);
        // The bulge column below the subdiagonal is annihilated.
        Value placed = o.Put(o.Put(h, k, km1, v1), o.Plus(k, 1), km1, o.F(0.0));
        placed = o.If(o.Lt(k, o.Plus(i, -1)), o.Put(placed, o.Plus(k, 2), km1, o.F(0.0)), placed);
        Value shrunk = o.Put(h, k, km1, o.Mul(o.At(h, k, km1), o.Sub(o.F(1.0), t1)));
        h = o.If(after_m, placed, o.If(o.Gt(m, l), shrunk, h));
        Value t2 = o.Mul(t1, v2), t3 = o.Mul(t1, v3);
        auto spread = [&](Value x) { return o.Spread(x, {n}); };
        Value k1 = o.Plus(k, 1), k2 = o.Min(o.Plus(k, 2), o.I(n - 1));
        Value rows = o.Rows(), columns = o.Columns();
        // From the left on rows k..k + 2, columns k..n - 1.
        Value r0 = o.Row(h, k), r1 = o.Row(h, k1), r2 = o.If(three, o.Row(h, k2), o.Zeros({n}));
        Value sum = o.Add(o.Add(r0, o.Mul(spread(v2), r1)), o.Mul(spread(v3), r2));
        Value from_k = o.Versus(columns, k, Direction::kGe);
        Value left = o.If(o.And(from_k, o.Versus(rows, k, Direction::kEq)),
                          o.AsRows(o.Sub(r0, o.Mul(sum, spread(t1)))), h);
        left = o.If(o.And(from_k, o.Versus(rows, k1, Direction::kEq)),
                    o.AsRows(o.Sub(r1, o.Mul(sum, spread(t2)))), left);
        Value in_k2 =
            o.And(o.And(from_k, o.Versus(rows, k2, Direction::kEq)), o.Spread(three, {n, n}));
        left = o.If(in_k2, o.AsRows(o.Sub(r2, o.Mul(sum, spread(t3)))), left);
        // From the right on columns k..k + 2 of rows 0..min(k + 3, i), and of Z.
        auto right = [&](Value x, Value row_mask) {
          Value c0 = o.Column(x, k), c1 = o.Column(x, k1);
          Value c2 = o.If(three, o.Column(x, k2), o.Zeros({n}));
          Value sum = o.Add(o.Add(c0, o.Mul(spread(v2), c1)), o.Mul(spread(v3), c2));
          Value y = o.If(o.And(row_mask, o.Versus(columns, k, Direction::kEq)),
                         o.AsColumns(o.Sub(c0, o.Mul(sum, spread(t1)))), x);
          y = o.If(o.And(row_mask, o.Versus(columns, k1, Direction::kEq)),
                   o.AsColumns(o.Sub(c1, o.Mul(sum, spread(t2)))), y);
          return o.If(o.And(o.And(row_mask, o.Versus(columns, k2, Direction::kEq)),
                            o.Spread(three, {n, n})),
                      o.AsColumns(o.Sub(c2, o.Mul(sum, spread(t3)))), y);
        };
        h = right(left, o.Versus(rows, o.Min(o.Plus(k, 3), i), Direction::kLe));
        z = right(z, o.Versus(rows, o.I(n - 1), Direction::kLe));
        return Values{h, z, o.Plus(k, 1), m, l, i, v1, v2, v3, s[9]};
      });
  return {out[0], out[1]};
}

// The Schur factorization H = Z T Z^T by lahqr (wantt, wantz) on rows and columns lo..hi.
// Returns (T, Z, info) with info lahqr's: 0, or the 1-based row whose eigenvalues did not
// converge within 30 max(10, hi - lo + 1) iterations.
Values Schur(FunctionBuilder& b, Value h, Value z, Value lo, Value hi) {
  const ElementType type = h.element_type();
  const int64_t n = h.dims()[0];
  Ops o{b, type, n};
  Value nh = o.Add(o.Sub(hi, lo), o.I(1));
  Value itmax = o.Mul(o.I(30), o.Max(o.I(10), nh));
  // State: h, z, i, l, its, kdefl, info, lo, hi, itmax.
  Values out = b.While(
      {h, z, hi, lo, o.I(0), o.I(0), o.I(0), lo, hi, itmax},
      [](FunctionBuilder& b, std::span<const Value> s) {
        return Values{b.And(b.Compare(s[2], s[7], Direction::kGe),
                            b.Compare(s[6], b.ConstantInt(kS32, 0), Direction::kEq))};
      },
      [=](FunctionBuilder& b, std::span<const Value> s) {
        Ops o{b, type, n};
        Value h = s[0], z = s[1], i = s[2], l = s[3], its = s[4], kdefl = s[5];
        Value lo = s[7], hi = s[8], itmax = s[9];
        const double ulp = o.Ulp(), safmin = o.SafeMinimum();
        Value smlnum = o.Mul(o.F(safmin), o.Div(b.Convert(o.Add(o.Sub(hi, lo), o.I(1)), type),
                                                 o.F(ulp)));
        // Deflation search over every subdiagonal entry at once; lahqr takes the lowest row
        // k in l + 1..i (counting down from i) whose entry counts as small.
        Value d = Diagonal(b, h);
        auto shifted = [&](Value v, int64_t by) { return o.Shifted(v, by); };
        Value sub = o.SubDiagonal(h), sup = o.SuperDiagonal(h);
        Value dprev = shifted(d, 1);
        Value kk = o.Positions();
        auto vf = [&](double x) { return b.Constant(type, x, {n}); };
        auto vs = [&](Value x) { return o.Spread(x, {n}); };
        Value tst = o.Add(o.Abs(dprev), o.Abs(d));
        Value extra = o.Add(o.Keep(o.Ge(o.Sub(kk, o.Spread(o.I(2), {n})), vs(lo)),
                                   o.Abs(shifted(sub, 1))),
                            o.Keep(o.Le(o.Add(kk, o.Spread(o.I(1), {n})), vs(hi)),
                                   o.Abs(shifted(sub, -1))));
        tst = o.If(o.Eq(tst, vf(0.0)), o.Add(tst, extra), tst);
        Value ab = o.Max(o.Abs(sub), o.Abs(sup)), ba = o.Min(o.Abs(sub), o.Abs(sup));
        Value diff = o.Abs(o.Sub(dprev, d));
        Value aa = o.Max(o.Abs(d), diff), bb = o.Min(o.Abs(d), diff);
        Value ss = o.Add(aa, ab);
        Value small = o.Le(o.Mul(ba, o.Div(ab, ss)),
                           o.Max(vs(smlnum), o.Mul(vf(ulp), o.Mul(bb, o.Div(aa, ss)))));
        small = o.Or(o.Le(o.Abs(sub), vs(smlnum)),
                     o.And(o.Le(o.Abs(sub), o.Mul(vf(ulp), tst)), small));
        Value eligible = o.And(o.And(o.Gt(kk, vs(l)), o.Le(kk, vs(i))), small);
        l = o.Max(l, o.MaxIndex(o.If(eligible, kk, o.Spread(o.I(-1), {n}))));
        Value lm1 = o.Max(o.Plus(l, -1), o.I(0));
        h = o.If(o.Gt(l, lo), o.Put(h, l, lm1, o.F(0.0)), h);
        Value deflate = o.Ge(l, o.Plus(i, -1));

        // Shifts: the eigenvalues of the trailing 2x2 block, or an exceptional pair.
        Value next_kdefl = o.Plus(kdefl, 1);
        Value im1 = o.Max(o.Plus(i, -1), o.I(0)), im2 = o.Max(o.Plus(i, -2), o.I(0));
        Value l1 = o.Min(o.Plus(l, 1), o.I(n - 1)), l2 = o.Min(o.Plus(l, 2), o.I(n - 1));
        Value at_i = o.Eq(b.Remainder(next_kdefl, o.I(20)), o.I(0));
        Value at_l = o.Eq(b.Remainder(next_kdefl, o.I(10)), o.I(0));
        Value s_i = o.Add(o.Abs(o.At(h, i, im1)), o.Abs(o.At(h, im1, im2)));
        Value s_l = o.Add(o.Abs(o.At(h, l1, l)), o.Abs(o.At(h, l2, l1)));
        Value s_ex = o.If(at_i, s_i, s_l);
        Value exceptional = o.Or(at_i, at_l);
        Value h11e = o.Add(o.Mul(o.F(0.75), s_ex), o.If(at_i, o.At(h, i, i), o.At(h, l, l)));
        Value h11 = o.If(exceptional, h11e, o.At(h, im1, im1));
        Value h21 = o.If(exceptional, s_ex, o.At(h, i, im1));
        Value h12 = o.If(exceptional, o.Mul(o.F(-0.4375), s_ex), o.At(h, im1, i));
        Value h22 = o.If(exceptional, h11e, o.At(h, i, i));
        Value scale = o.Add(o.Add(o.Add(o.Abs(h11), o.Abs(h12)), o.Abs(h21)), o.Abs(h22));
        Value zero_s = o.Eq(scale, o.F(0.0));
        h11 = o.Div(h11, scale);
        h21 = o.Div(h21, scale);
        h12 = o.Div(h12, scale);
        h22 = o.Div(h22, scale);
        Value tr = o.Div(o.Add(h11, h22), o.F(2.0));
        Value det = o.Sub(o.Mul(o.Sub(h11, tr), o.Sub(h22, tr)), o.Mul(h12, h21));
        Value rtdisc = o.Sqrt(o.Abs(det));
        Value complex = o.Ge(det, o.F(0.0));
        Value p1 = o.Add(tr, rtdisc), p2 = o.Sub(tr, rtdisc);
        Value nearer = o.If(o.Le(o.Abs(o.Sub(p1, h22)), o.Abs(o.Sub(p2, h22))), p1, p2);
        Value rt1r = o.If(zero_s, o.F(0.0), o.If(complex, o.Mul(tr, scale), o.Mul(nearer, scale)));
        Value rt2r = rt1r;
        Value rt1i = o.If(o.Or(zero_s, o.Not(complex)), o.F(0.0), o.Mul(rtdisc, scale));
        Value rt2i = b.Negate(rt1i);

        // The start m of the bulge: from i - 2 down to l, the first row where the bulge would
        // leave a negligible entry h[m, m - 1].
        Values found = b.While(
            {h, im2, l, rt1r, rt2r, rt1i, rt2i, deflate, o.F(0.0), o.F(0.0), o.F(0.0)},
            [](FunctionBuilder& b, std::span<const Value> v) { return Values{b.Not(v[7])}; },
            [=](FunctionBuilder& b, std::span<const Value> v) {
              Ops o{b, type, n};
              Value h = v[0], m = v[1], l = v[2], rt1r = v[3], rt2r = v[4], rt1i = v[5],
                    rt2i = v[6];
              Value m1 = o.Plus(m, 1), m2 = o.Min(o.Plus(m, 2), o.I(n - 1));
              Value mm1 = o.Max(o.Plus(m, -1), o.I(0));
              Value hmm = o.At(h, m, m), hm1m1 = o.At(h, m1, m1);
              Value h21s = o.At(h, m1, m);
              Value sm = o.Add(o.Add(o.Abs(o.Sub(hmm, rt2r)), o.Abs(rt2i)), o.Abs(h21s));
              h21s = o.Div(h21s, sm);
              Value w1 = o.Sub(o.Add(o.Mul(h21s, o.At(h, m, m1)),
                                     o.Mul(o.Sub(hmm, rt1r), o.Div(o.Sub(hmm, rt2r), sm))),
                               o.Mul(rt1i, o.Div(rt2i, sm)));
              Value w2 = o.Mul(h21s, o.Sub(o.Sub(o.Add(hmm, hm1m1), rt1r), rt2r));
              Value w3 = o.Mul(h21s, o.At(h, m2, m1));
              Value sw = o.Add(o.Add(o.Abs(w1), o.Abs(w2)), o.Abs(w3));
              w1 = o.Div(w1, sw);
              w2 = o.Div(w2, sw);
              w3 = o.Div(w3, sw);
              Value lhs = o.Mul(o.Abs(o.At(h, m, mm1)), o.Add(o.Abs(w2), o.Abs(w3)));
              Value rhs = o.Mul(o.Mul(o.F(o.Ulp()), o.Abs(w1)),
                                o.Add(o.Add(o.Abs(o.At(h, mm1, mm1)), o.Abs(hmm)), o.Abs(hm1m1)));
              Value stop = o.Or(o.Eq(m, l), o.Le(lhs, rhs));
              return Values{h,    o.If(stop, m, o.Plus(m, -1)), l, rt1r, rt2r, rt1i, rt2i, stop,
                            w1,   w2,   w3};
            });
        Values swept = Sweep(b, h, z, found[1], l, i, found[8], found[9], found[10], deflate);

        // Deflation of a 1x1 or 2x2 block at the bottom of the active window.
        Values block = Lanv2(o, o.At(h, im1, im1), o.At(h, im1, i), o.At(h, i, im1), o.At(h, i, i));
        Value cs = block[4], sn = block[5];
        Value rotated = o.Put(o.Put(o.Put(o.Put(h, im1, im1, block[0]), im1, i, block[1]), i, im1,
                                    block[2]),
                              i, i, block[3]);
        Value rows = o.Rows(), columns = o.Columns();
        auto rotate_rows = [&](Value x, Value mask) {  // rows i - 1 and i where mask
          Value x1 = o.AsRows(o.Row(x, im1)), x2 = o.AsRows(o.Row(x, i));
          Value csn = o.Spread(cs, {n, n}), snn = o.Spread(sn, {n, n});
          Value y = o.If(o.And(mask, o.Versus(rows, im1, Direction::kEq)),
                         o.Add(o.Mul(csn, x1), o.Mul(snn, x2)), x);
          return o.If(o.And(mask, o.Versus(rows, i, Direction::kEq)),
                      o.Sub(o.Mul(csn, x2), o.Mul(snn, x1)), y);
        };
        auto rotate_columns = [&](Value x, Value mask) {  // columns i - 1 and i where mask
          Value x1 = o.AsColumns(o.Column(x, im1)), x2 = o.AsColumns(o.Column(x, i));
          Value csn = o.Spread(cs, {n, n}), snn = o.Spread(sn, {n, n});
          Value y = o.If(o.And(mask, o.Versus(columns, im1, Direction::kEq)),
                         o.Add(o.Mul(csn, x1), o.Mul(snn, x2)), x);
          return o.If(o.And(mask, o.Versus(columns, i, Direction::kEq)),
                      o.Sub(o.Mul(csn, x2), o.Mul(snn, x1)), y);
        };
        rotated = rotate_rows(rotated, o.Versus(columns, i, Direction::kGt));
        rotated = rotate_columns(rotated, o.Versus(rows, o.Plus(i, -2), Direction::kLe));
        Value z_rotated = rotate_columns(z, o.Versus(rows, o.I(n - 1), Direction::kLe));
        Value pair = o.And(deflate, o.Eq(l, o.Plus(i, -1)));

        Value next_its = o.Plus(its, 1);
        Value failed = o.And(o.Not(deflate), o.Gt(next_its, itmax));
        return Values{o.If(pair, rotated, o.If(deflate, h, swept[0])),
                      o.If(pair, z_rotated, o.If(deflate, z, swept[1])),
                      o.If(deflate, o.Plus(l, -1), i),
                      o.If(deflate, lo, l),
                      o.If(deflate, o.I(0), next_its),
                      o.If(deflate, o.I(0), next_kdefl),
                      o.If(failed, o.Plus(i, 1), o.I(0)),
                      lo,
                      hi,
                      itmax};
      });
  return {out[0], out[1], out[6]};
}

// ---- eigenvalues, trevc, gebak, normalization -----------------------------------------------

// Eigenvalues (wr, wi) read off the quasi-triangular T: a nonzero subdiagonal entry marks a
// complex pair, the first with positive imaginary part.
std::pair<Value, Value> SchurEigenvalues(const Ops& o, Value t) {
  FunctionBuilder& b = o.b;
  const int64_t n = o.n;
  Value d = Diagonal(b, t);
  if (n == 1) return {d, o.Zeros({1})};
  Value sub = o.SubDiagonal(t), sup = o.SuperDiagonal(t);
  Value sub_next = o.Shifted(sub, -1), sup_next = o.Shifted(sup, -1);
  Value zeros = o.Zeros({n});
  Value first = o.Ne(sub_next, zeros), second = o.Ne(sub, zeros);
  Value w1 = o.Mul(o.Sqrt(o.Abs(sup_next)), o.Sqrt(o.Abs(sub_next)));
  Value w2 = b.Negate(o.Mul(o.Sqrt(o.Abs(sup)), o.Sqrt(o.Abs(sub))));
  return {d, o.If(first, w1, o.If(second, w2, zeros))};
}

// Complex arithmetic on (real, imaginary) pairs of real values.
struct Complex {
  Value re, im;
};
Complex CMul(const Ops& o, Complex x, Complex y) {
  return {o.Sub(o.Mul(x.re, y.re), o.Mul(x.im, y.im)), o.Add(o.Mul(x.re, y.im), o.Mul(x.im, y.re))};
}
Complex CSub(const Ops& o, Complex x, Complex y) { return {o.Sub(x.re, y.re), o.Sub(x.im, y.im)}; }
// Smith's division: no square of the divisor, which underflows for divisors near smin.
Complex CDiv(const Ops& o, Complex x, Complex y) {
  Value real_larger = o.Ge(o.Abs(y.re), o.Abs(y.im));
  Value r = o.If(real_larger, o.Div(y.im, y.re), o.Div(y.re, y.im));
  Value denominator =
      o.If(real_larger, o.Add(y.re, o.Mul(y.im, r)), o.Add(y.im, o.Mul(y.re, r)));
  Value re = o.If(real_larger, o.Add(x.re, o.Mul(x.im, r)), o.Add(o.Mul(x.re, r), x.im));
  Value im = o.If(real_larger, o.Sub(x.im, o.Mul(x.re, r)), o.Sub(o.Mul(x.im, r), x.re));
  return {o.Div(re, denominator), o.Div(im, denominator)};
}

// Right eigenvectors of the quasi-triangular T, one complex column per eigenvalue (trevc's back
// substitution, every column at once): column c is 1 (or the 2x2 block's null vector) at its own
// block and solved upwards block by block. Returns (real, imaginary) parts.
std::pair<Value, Value> TriangularEigenvectors(const Ops& o, Value t, Value wr, Value wi) {
  FunctionBuilder& b = o.b;
  const ElementType type = o.type;
  const int64_t n = o.n;
  Value sub = o.SubDiagonal(t), sup = o.SuperDiagonal(t);
  Value sub_next = o.Shifted(sub, -1), sup_next = o.Shifted(sup, -1);
  Value zeros = o.Zeros({n});
  Value positive = o.Gt(wi, zeros), negative = o.Lt(wi, zeros);
  Value columns_iota = o.Positions();
  Value top = o.If(negative, o.Sub(columns_iota, o.Spread(o.I(1), {n})), columns_iota);
  // The 2x2 block's null vector, as trevc scales it: [1, i wi / b] or [-wi / c, i].
  Value bv = o.If(positive, sup_next, sup), cv = o.If(positive, sub_next, sub);
  Value w = o.Abs(wi);
  Value big = o.Ge(o.Abs(bv), o.Abs(cv));
  Value ones = b.Constant(type, 1.0, {n});
  Value top_re = o.If(big, ones, o.Div(b.Negate(w), cv));
  Value bottom_im = o.If(big, o.Div(w, bv), ones);
  bottom_im = o.If(negative, b.Negate(bottom_im), bottom_im);
  Value pair = o.Or(positive, negative);
  Value rows = o.Rows();
  Value at_top = o.Eq(rows, o.AsRows(top));
  Value at_bottom = o.And(o.AsRows(pair), o.Eq(rows, o.AsRows(o.Add(top, o.Spread(o.I(1), {n})))));
  Value xr = o.If(at_top, o.AsRows(o.If(pair, top_re, ones)), o.Zeros({n, n}));
  Value xi = o.If(at_bottom, o.AsRows(bottom_im), o.Zeros({n, n}));
  Value smlnum = o.F(o.SafeMinimum() * (static_cast<double>(n) / o.Ulp()));
  Value smin = o.Max(o.Mul(o.Spread(o.F(o.Ulp()), {n}), o.Add(o.Abs(wr), o.Abs(wi))),
                     o.Spread(smlnum, {n}));
  Values out = b.While(
      {xr, xi, t, wr, wi, top, smin, o.I(n - 1)},
      [](FunctionBuilder& b, std::span<const Value> s) {
        return Values{b.Compare(s[7], b.ConstantInt(kS32, 0), Direction::kGe)};
      },
      [=](FunctionBuilder& b, std::span<const Value> s) {
        Ops o{b, type, n};
        Value xr = s[0], xi = s[1], t = s[2], top = s[5], smin = s[6], j = s[7];
        Complex lambda{s[3], s[4]};
        Value jm1 = o.Max(o.Plus(j, -1), o.I(0));
        Value two = o.And(o.Ge(j, o.I(1)), o.Ne(o.At(t, j, jm1), o.F(0.0)));
        Value active = o.Gt(top, o.Spread(j, {n}));
        auto spread = [&](Value x) { return o.Spread(x, {n}); };
        auto rhs = [&](Value r) {  // -(T[r, :] X) per column
          Value row = o.Row(t, r);
          return Complex{b.Negate(o.VecMat(row, xr)), b.Negate(o.VecMat(row, xi))};
        };
        Complex r2 = rhs(j), r1 = rhs(jm1);
        Complex m22 = CSub(o, {spread(o.At(t, j, j)), o.Zeros({n})}, lambda);
        // 1x1 block: a diagonal entry too close to the eigenvalue is replaced by smin.
        Value tiny = o.Lt(o.Add(o.Abs(m22.re), o.Abs(m22.im)), smin);
        Complex d1{o.If(tiny, smin, m22.re), o.If(tiny, o.Zeros({n}), m22.im)};
        Complex x1x1 = CDiv(o, r2, d1);
        // 2x2 block on rows j - 1, j.
        Complex m11 = CSub(o, {spread(o.At(t, jm1, jm1)), o.Zeros({n})}, lambda);
        Complex m12{spread(o.At(t, jm1, j)), o.Zeros({n})};
        Complex m21{spread(o.At(t, j, jm1)), o.Zeros({n})};
        Complex det = CSub(o, CMul(o, m11, m22), CMul(o, m12, m21));
        Complex upper = CDiv(o, CSub(o, CMul(o, r1, m22), CMul(o, m12, r2)), det);
        Complex lower = CDiv(o, CSub(o, CMul(o, m11, r2), CMul(o, m21, r1)), det);
        Value rows = o.Rows();
        Value in_j = o.And(o.AsRows(active), o.Versus(rows, j, Direction::kEq));
        Value in_jm1 =
            o.And(o.And(o.AsRows(active), o.Versus(rows, jm1, Direction::kEq)),
                  o.Spread(two, {n, n}));
        Value lower_re = o.If(two, lower.re, x1x1.re), lower_im = o.If(two, lower.im, x1x1.im);
        xr = o.If(in_jm1, o.AsRows(upper.re), o.If(in_j, o.AsRows(lower_re), xr));
        xi = o.If(in_jm1, o.AsRows(upper.im), o.If(in_j, o.AsRows(lower_im), xi));
        return Values{xr, xi, t, s[3], s[4], top, smin, o.If(two, o.Plus(j, -2), o.Plus(j, -1))};
      });
  return {out[0], out[1]};
}

// gebak: undoes the balancing on the rows of the eigenvectors.
std::pair<Value, Value> Unbalance(FunctionBuilder& b, Value vr, Value vi, const Balanced& bal) {
  const ElementType type = vr.element_type();
  const int64_t n = vr.dims()[0];
  Ops o{b, type, n};
  vr = o.Mul(vr, o.AsColumns(bal.scale));
  vi = o.Mul(vi, o.AsColumns(bal.scale));
  Values out = stablehlo::ForLoop(
      b, 0, n, {vr, vi, bal.perm, bal.lo, bal.hi},
      [=](FunctionBuilder& b, Value ii, std::span<const Value> c) {
        Ops o{b, type, n};
        Value lo = c[3], hi = c[4];
        Value below = o.Lt(ii, lo);
        Value i = o.If(below, o.Sub(o.Plus(lo, -1), ii), ii);
        Value active = o.Or(below, o.Gt(ii, hi));
        Value k = o.Entry(c[2], i);
        return Values{o.If(active, o.SwapRows(c[0], i, k, o.I(0)), c[0]),
                      o.If(active, o.SwapRows(c[1], i, k, o.I(0)), c[1]), c[2], lo, hi};
      });
  return {out[0], out[1]};
}

// geev's normalization: unit 2-norm columns, a complex one rotated so that its largest
// component is real.
std::pair<Value, Value> Normalize(const Ops& o, Value vr, Value vi, Value wi) {
  FunctionBuilder& b = o.b;
  const int64_t n = o.n;
  Value pair = o.Ne(wi, o.Zeros({n}));
  Value nr = o.Sqrt(Sum(b, o.Mul(vr, vr), {0})), ni = o.Sqrt(Sum(b, o.Mul(vi, vi), {0}));
  Value norm = o.If(pair, o.Max(nr, ni), nr);
  Value ratio = o.Div(o.Min(nr, ni), norm);
  norm = o.If(pair, o.Mul(norm, o.Sqrt(o.Add(b.Constant(o.type, 1.0, {n}), o.Mul(ratio, ratio)))),
              norm);
  Value scale = o.AsRows(o.Div(b.Constant(o.type, 1.0, {n}), norm));
  vr = o.Mul(vr, scale);
  vi = o.Mul(vi, scale);
  // The first row of largest modulus, per column.
  Value modulus = o.Add(o.Mul(vr, vr), o.Mul(vi, vi));
  Value largest = o.AsRows(b.Reduce({modulus}, {o.F(-1.0)}, {0},
                              [](FunctionBuilder& body, std::span<const Value> args) {
                                return Values{body.Maximum(args[0], args[1])};
                              })[0]);
  Value rows = o.Rows();
  Value candidates = b.Select(o.Eq(modulus, largest), rows, o.Spread(o.I(n), {n, n}));
  Value first = b.Reduce({candidates}, {o.I(n)}, {0},
                         [](FunctionBuilder& body, std::span<const Value> args) {
                           return Values{body.Minimum(args[0], args[1])};
                         })[0];
  Value at = o.Eq(rows, o.AsRows(first));
  Value f = Sum(b, o.Keep(at, vr), {0}), g = Sum(b, o.Keep(at, vi), {0});
  Value d = o.Sqrt(o.Add(o.Mul(f, f), o.Mul(g, g)));
  Value cs = o.Div(o.Abs(f), d);
  Value sn = o.Div(g, o.Sign(d, f));
  Value keep = o.Not(pair);
  cs = o.If(keep, b.Constant(o.type, 1.0, {n}), cs);
  sn = o.If(keep, o.Zeros({n}), sn);
  Value csn = o.AsRows(cs), snn = o.AsRows(sn);
  Value re = o.Add(o.Mul(csn, vr), o.Mul(snn, vi));
  Value im = o.Sub(o.Mul(csn, vi), o.Mul(snn, vr));
  im = o.If(o.And(at, o.AsRows(pair)), o.Zeros({n, n}), im);
  return {re, im};
}

// The whole of geev on one matrix: (wr, wi, vr, vi, info).
Values Geev(FunctionBuilder& b, Value a, bool vectors) {
  const ElementType type = a.element_type();
  const int64_t n = a.dims()[0];
  Ops o{b, type, n};
  if (n == 1) {
    Value one = b.Constant(type, 1.0, {1, 1});
    return {b.Reshape(a, {1}), o.Zeros({1}), o.I(0), one, o.Zeros({1, 1})};
  }
  Balanced bal = Balance(b, a);
  auto [h, q] = Hessenberg(b, bal.a, bal.lo, bal.hi);
  Values schur = Schur(b, h, q, bal.lo, bal.hi);
  auto [wr, wi] = SchurEigenvalues(o, schur[0]);
  if (!vectors) return {wr, wi, schur[2]};
  auto [xr, xi] = TriangularEigenvectors(o, schur[0], wr, wi);
  Value vr = o.MatMul(schur[1], xr), vi = o.MatMul(schur[1], xi);
  std::tie(vr, vi) = Unbalance(b, vr, vi, bal);
  std::tie(vr, vi) = Normalize(o, vr, vi, wi);
  return {wr, wi, schur[2], vr, vi};
}

constexpr char kNoConvergence[] =
    "linalg.eig: The algorithm failed to converge because the input matrix is ill-conditioned or "
    "has too many repeated eigenvalues (error code: ";

// Eigenvalues (and with `vectors` eigenvectors) of every matrix of the batch, one after another.
Values EigLowering(LoweringContext& context, const Operand& input, bool vectors) {
  auto& b = context.builder();
  const CpuLinalgNames names{vectors ? "linalg.eig" : "linalg.eigvals", "linalg_eig_out_cpu"};
  // CPU's dispatch to the complex result type fails first for integral input.
  TORCH_CHECK(c10::isFloatingType(input.dtype) || c10::isComplexType(input.dtype),
              "Unknown Complex ScalarType for ", c10::toString(input.dtype));
  // Eager kernels send complex input to the CPU (aten/lowered_kernels.cc); zgeev is not lowered.
  TORCH_CHECK_NOT_IMPLEMENTED(!c10::isComplexType(input.dtype), names.function,
                              ": the tpu lowering takes real input only, got ",
                              c10::toString(input.dtype));
  CheckSquare(input, "A", names);
  const std::vector<int64_t> batch = BatchDims(input.value);
  Value a = FlattenBatch(b, input.value);
  const ElementType type = a.element_type();
  // CPU checks this on the host; here it is a device-side check, and the loops run on zeros
  // instead (an iteration on NaNs would not end).
  Value finite = b.Not(Any(b, b.Not(b.IsFinite(a))));
  context.CheckNotViolated(b.Not(finite),
                           "torch.linalg.eig: input tensor should not contain infs or NaNs.");
  a = b.Select(finite, a, b.Constant(type, 0.0, a.dims()));
  const int64_t count = a.dims()[0], n = a.dims()[1];
  Value wr = b.Constant(type, 0.0, {count, n}), wi = wr;
  Value vr = b.Constant(type, 0.0, {count, n, n}), vi = vr;
  Value info = b.ConstantInt(kS32, 0, {count});
  if (count > 0 && n > 0) {
    Values out = stablehlo::ForLoop(
        b, 0, count, {a, wr, wi, vr, vi, info},
        [=](FunctionBuilder& b, Value index, std::span<const Value> c) {
          Ops o{b, type, n};
          Value matrix = b.Reshape(b.DynamicSlice(c[0], {index, o.I(0), o.I(0)}, {1, n, n}),
                                   {n, n});
          Values r = Geev(b, matrix, vectors);
          auto put_vector = [&](Value into, Value v) {
            return b.DynamicUpdateSlice(into, b.Reshape(v, {1, n}), {index, o.I(0)});
          };
          auto put_matrix = [&](Value into, Value m) {
            return b.DynamicUpdateSlice(into, b.Reshape(m, {1, n, n}), {index, o.I(0), o.I(0)});
          };
          Value info = b.DynamicUpdateSlice(c[5], b.Reshape(r[2], {1}), {index});
          return Values{c[0],
                        put_vector(c[1], r[0]),
                        put_vector(c[2], r[1]),
                        vectors ? put_matrix(c[3], r[3]) : c[3],
                        vectors ? put_matrix(c[4], r[4]) : c[4],
                        info};
        });
    wr = out[1];
    wi = out[2];
    vr = out[3];
    vi = out[4];
    info = out[5];
  }
  // CPU's message quotes the info (the row lahqr stopped at): one check per possible value.
  for (int64_t code = 1; code <= n; ++code) {
    Value failed = b.Compare(info, b.ConstantInt(kS32, code, {count}), Direction::kEq);
    context.CheckNotViolated(Any(b, failed),
                             std::string(kNoConvergence) + std::to_string(code) + ").");
  }
  Value eigenvalues = UnflattenBatch(b, b.Complex(wr, wi), batch);
  if (!vectors) return {eigenvalues};
  return {eigenvalues, UnflattenBatch(b, b.Complex(vr, vi), batch)};
}

// linalg_eig(Tensor self) -> (Tensor eigenvalues, Tensor eigenvectors)
Values LinalgEig(LoweringContext& context, std::span<const Operand> operands) {
  return EigLowering(context, operands[0], true);
}
TORCH_TPU_LOWERING(LinalgEig, "aten::linalg_eig", "aten::linalg_eig.out");

// _linalg_eigvals(Tensor self) -> Tensor
Values LinalgEigvals(LoweringContext& context, std::span<const Operand> operands) {
  return EigLowering(context, operands[0], false);
}
TORCH_TPU_LOWERING(LinalgEigvals, "aten::_linalg_eigvals", "aten::linalg_eigvals.out");

}  // namespace
}  // namespace torch_tpu::lowering::linalg
