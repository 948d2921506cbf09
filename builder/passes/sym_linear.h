// sym_linear: symbolic dims as linear expressions over the model's dim symbols, so shape arithmetic
// written by exporters names the same dim the same way: (past+seq)-past is seq, seq+past and
// past+seq are one dim. A Dim's symbol holds the canonical text: a bare symbol, or
// "(t1+t2...+c)" whose terms are sorted symbols with integer factors ("2*seq", "-past"); symbols
// that are not plain identifiers (products, quotients, odd dim_params) appear in brackets and are
// opaque. Bounds over the profile's ranges let passes prove facts for every shape of a profile.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "builder/graph.h"

namespace kiln {

struct LinearDim {
  std::map<std::string, int64_t> terms;  // opaque symbol -> factor (never 0)
  int64_t constant = 0;
};

// A known dim, or a symbol read as a linear expression (a symbol that is not one is one opaque term).
// nullopt for an unknown dim.
std::optional<LinearDim> to_linear(const Dim& d);
Dim from_linear(const LinearDim& l);

// a + sign * b, canonical. Unknown when either is unknown.
Dim linear_add(const Dim& a, const Dim& b, int64_t sign);
// k * a for a known factor k.
Dim linear_scale(const Dim& a, int64_t k);

// factor · Π num / Π den, for dims that are each a positive number or a symbol (a linear one such as
// "2*seq" counts as its factor times its symbol): e.g. the rows a block of rows becomes through a
// Reshape, 1 · (B·E) / E = B. nullopt unless the quotient is exact and is a number or one symbol
// times a number (a product of symbols has no Dim).
std::optional<Dim> dim_product_ratio(const Dim& factor, const std::vector<Dim>& num, const std::vector<Dim>& den);

// Inclusive value range of each symbol (a profile's min/max); symbols absent are in [0, +inf).
using DimRanges = std::map<std::string, std::pair<int64_t, int64_t>>;
constexpr int64_t kUnbounded = INT64_MAX;
// [lo, hi] of a dim over the ranges (±kUnbounded where not bounded); nullopt if the dim is unknown.
std::optional<std::pair<int64_t, int64_t>> dim_bounds(const Dim& d, const DimRanges& ranges);

}  // namespace kiln
