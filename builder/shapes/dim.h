// Symbolic dims as interned expressions.
//
// A Dim is a known size, a symbolic expression over the model's dim symbols (its dim_params), or
// unknown. Expressions are interned: one object per distinct expression for the life of the
// process, so equal dims are equal pointers and a rewrite never re-parses text. They are kept in
// a canonical form, so the shape arithmetic exporters write names the same dim the same way:
//   - affine sums  c + k1*t1 + k2*t2 ...  (terms sorted, equal terms merged, zero factors dropped):
//     (past+seq)-past is seq, seq+past and past+seq are one dim, 2*seq - seq is seq;
//   - products of two or more non-constant factors (a Reshape merging symbolic dims: [B, S, D] ->
//     [B*S, D]); a constant factor scales instead (2*seq is an affine term);
//   - floor quotients floor(a / b) that do not simplify (a sum whose factors all divide b does,
//     and so does a product with b among its factors).
// Text (str()) keeps the form error messages and tests have always shown: "seq", "(past+seq)",
// "(-past+1151)", "(2*seq)", "(batch*seq)"; a term that is not a plain identifier appears in
// brackets inside a sum: "(seq+[seq-len])".
//
// Expressions evaluate at a point (every symbol given a value), substitute some symbols, and bound
// over a profile's ranges, so a profile's min, opt and max shapes are read off the one symbolic
// graph instead of re-running the pass pipeline at each point.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln {

struct DimExpr;  // interned; see dim.cpp

// One dimension: a known size, a symbolic expression, or unknown (value < 0 and no expression).
struct Dim {
  int64_t value = -1;
  const DimExpr* expr = nullptr;

  static Dim known(int64_t v) { return Dim{v, nullptr}; }
  // The symbol `name` (a model's dim_param, any text), never parsed.
  static Dim sym(std::string_view name);
  bool is_known() const { return value >= 0; }
  bool is_symbol() const { return value < 0 && expr != nullptr; }  // any symbolic expression
  // The name when the dim is one bare symbol, else "" (composite expressions, sizes, unknown).
  const std::string& sym_name() const;
  bool operator==(const Dim& o) const { return value == o.value && expr == o.expr; }
  bool operator!=(const Dim& o) const { return !(*this == o); }
  std::string str() const;  // "384", "seq", "(past+seq)", "?"
};

// Symbol values by name (a point of a profile, or the symbols a profile fixes).
using SymbolValues = std::map<std::string, int64_t>;

// Inclusive value range of each symbol (a profile's min/max); symbols absent are in [0, +inf).
using DimRanges = std::map<std::string, std::pair<int64_t, int64_t>>;
constexpr int64_t kUnbounded = INT64_MAX;

// Arithmetic on dims. Unknown in, unknown out; a result that is a negative number is unknown
// (no dim is negative), except inside expressions, where negative factors and constants are fine.
Dim dim_add(const Dim& a, const Dim& b);
Dim dim_sub(const Dim& a, const Dim& b);
Dim dim_mul(const Dim& a, const Dim& b);
Dim dim_floordiv(const Dim& a, const Dim& b);  // unknown for a known zero divisor
// a + sign * b, and k * a: the affine forms the passes use most.
Dim linear_add(const Dim& a, const Dim& b, int64_t sign);
Dim linear_scale(const Dim& a, int64_t k);

// factor · Π num / Π den as one dim, when the quotient is exact: the rows a block of rows becomes
// through a Reshape, 1 · (B·E) / E = B. nullopt when it does not divide out exactly.
std::optional<Dim> dim_product_ratio(const Dim& factor, const std::vector<Dim>& num, const std::vector<Dim>& den);

// [lo, hi] of a dim over the ranges (±kUnbounded where not bounded); nullopt if the dim is unknown.
std::optional<std::pair<int64_t, int64_t>> dim_bounds(const Dim& d, const DimRanges& ranges);

// The dim's value with every symbol given; nullopt when a symbol is missing or the dim is unknown.
std::optional<int64_t> dim_evaluate(const Dim& d, const SymbolValues& values);
// The dim with the given symbols replaced by their values (others stay symbolic).
Dim dim_substitute(const Dim& d, const SymbolValues& values);
// The expression of a dim (a known size is a constant expression; nullptr for unknown), and the
// dim of an expression: the plugin API's opaque ShapeExpr is a DimExpr.
const DimExpr* dim_expr(const Dim& d);
Dim dim_from_expr(const DimExpr* e);
// The names of the symbols a dim depends on (sorted).
std::vector<std::string> dim_symbols(const Dim& d);

}  // namespace kiln
