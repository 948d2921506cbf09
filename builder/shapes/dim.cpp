#include "builder/shapes/dim.h"

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace kiln {

enum class DimOp { kConst, kSymbol, kSum, kProduct, kFloorDiv };

// An interned expression. Children are interned too, so a node's identity is its address and
// compound keys are built from the children's addresses.
struct DimExpr {
  DimOp op = DimOp::kConst;
  int64_t constant = 0;                                   // kConst: the value; kSum: the constant part
  std::string name;                                       // kSymbol
  std::vector<std::pair<const DimExpr*, int64_t>> terms;  // kSum: (term, factor), no sums or constants among the terms
  std::vector<const DimExpr*> factors;                    // kProduct: >= 2 non-constant non-sum-monomial factors; kFloorDiv: {num, den}
  std::string text;                                       // display form, see dim.h
};

namespace {

bool plain_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != ':') return false;
  return true;
}

// The process-wide table. Expressions are never freed: a build creates a few hundred.
class Interner {
 public:
  static Interner& get() {
    static Interner* in = new Interner();
    return *in;
  }
  const DimExpr* intern(DimExpr e) {
    std::string key = key_of(e);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = table_.find(key);
    if (it != table_.end()) return it->second.get();
    e.text = text_of(e);
    auto owned = std::make_unique<DimExpr>(std::move(e));
    const DimExpr* p = owned.get();
    table_.emplace(std::move(key), std::move(owned));
    return p;
  }

 private:
  static std::string ptr_key(const DimExpr* p) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(p));
    return buf;
  }
  static std::string key_of(const DimExpr& e) {
    switch (e.op) {
      case DimOp::kConst: return "c" + std::to_string(e.constant);
      case DimOp::kSymbol: return "s" + e.name;
      case DimOp::kSum: {
        std::string k = "+" + std::to_string(e.constant);
        for (const auto& [t, f] : e.terms) k += "," + ptr_key(t) + "*" + std::to_string(f);
        return k;
      }
      case DimOp::kProduct: {
        std::string k = "*";
        for (const DimExpr* f : e.factors) k += "," + ptr_key(f);
        return k;
      }
      case DimOp::kFloorDiv: return "/" + ptr_key(e.factors[0]) + "," + ptr_key(e.factors[1]);
    }
    return {};
  }
  static std::string text_of(const DimExpr& e) {
    switch (e.op) {
      case DimOp::kConst: return std::to_string(e.constant);
      case DimOp::kSymbol: return e.name;
      case DimOp::kSum: {
        std::string s;
        for (const auto& [t, k] : e.terms) {
          s += k < 0 ? "-" : (s.empty() ? "" : "+");
          if (k != 1 && k != -1) s += std::to_string(k < 0 ? -k : k) + "*";
          s += plain_identifier(t->text) ? t->text : "[" + t->text + "]";
        }
        if (e.constant) s += (e.constant < 0 ? "-" : "+") + std::to_string(e.constant < 0 ? -e.constant : e.constant);
        return "(" + s + ")";
      }
      case DimOp::kProduct: {
        std::string s;
        for (const DimExpr* f : e.factors) s += (s.empty() ? "" : "*") + f->text;
        return "(" + s + ")";
      }
      case DimOp::kFloorDiv: return "floor(" + e.factors[0]->text + "/" + e.factors[1]->text + ")";
    }
    return {};
  }

  std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<DimExpr>> table_;
};

const DimExpr* make_const(int64_t c) {
  DimExpr e;
  e.op = DimOp::kConst;
  e.constant = c;
  return Interner::get().intern(std::move(e));
}

const DimExpr* make_symbol(std::string_view name) {
  DimExpr e;
  e.op = DimOp::kSymbol;
  e.name = std::string(name);
  return Interner::get().intern(std::move(e));
}

bool text_before(const DimExpr* a, const DimExpr* b) { return a->text != b->text ? a->text < b->text : a < b; }

// c + Σ k·t, flattened (sums inside are expanded, constants folded) and canonical.
const DimExpr* make_sum(const std::vector<std::pair<const DimExpr*, int64_t>>& in, int64_t c) {
  std::vector<std::pair<const DimExpr*, int64_t>> terms;
  auto add = [&](const DimExpr* t, int64_t k) {
    for (auto& [u, f] : terms)
      if (u == t) {
        f += k;
        return;
      }
    terms.emplace_back(t, k);
  };
  for (const auto& [t, k] : in) {
    if (k == 0) continue;
    if (t->op == DimOp::kConst) {
      c += k * t->constant;
    } else if (t->op == DimOp::kSum) {
      c += k * t->constant;
      for (const auto& [u, f] : t->terms) add(u, k * f);
    } else {
      add(t, k);
    }
  }
  terms.erase(std::remove_if(terms.begin(), terms.end(), [](const auto& p) { return p.second == 0; }), terms.end());
  if (terms.empty()) return make_const(c);
  if (terms.size() == 1 && terms[0].second == 1 && c == 0) return terms[0].first;
  std::sort(terms.begin(), terms.end(), [](const auto& a, const auto& b) { return text_before(a.first, b.first); });
  DimExpr e;
  e.op = DimOp::kSum;
  e.constant = c;
  e.terms = std::move(terms);
  return Interner::get().intern(std::move(e));
}

// e as coeff · core, where core is 1 (nullptr) or a non-constant expression that is not a scaled
// single term: 6 -> (6, null); 2*seq -> (2, seq); (past+seq) -> (1, (past+seq)).
std::pair<int64_t, const DimExpr*> split_coefficient(const DimExpr* e) {
  if (e->op == DimOp::kConst) return {e->constant, nullptr};
  if (e->op == DimOp::kSum && e->constant == 0 && e->terms.size() == 1) return {e->terms[0].second, e->terms[0].first};
  return {1, e};
}

void append_factors(const DimExpr* core, std::vector<const DimExpr*>& out) {
  if (!core) return;
  if (core->op == DimOp::kProduct) out.insert(out.end(), core->factors.begin(), core->factors.end());
  else out.push_back(core);
}

// coeff · Π factors, canonical.
const DimExpr* make_product_of(int64_t coeff, std::vector<const DimExpr*> factors) {
  if (coeff == 0) return make_const(0);
  std::sort(factors.begin(), factors.end(), text_before);
  const DimExpr* core = nullptr;
  if (factors.size() == 1) {
    core = factors[0];
  } else if (factors.size() > 1) {
    DimExpr e;
    e.op = DimOp::kProduct;
    e.factors = std::move(factors);
    core = Interner::get().intern(std::move(e));
  }
  if (!core) return make_const(coeff);
  return make_sum({{core, coeff}}, 0);  // scales a sum core term by term
}

const DimExpr* make_product(const DimExpr* a, const DimExpr* b) {
  auto [ka, ca] = split_coefficient(a);
  auto [kb, cb] = split_coefficient(b);
  if (__builtin_mul_overflow(ka, kb, &ka)) return nullptr;
  std::vector<const DimExpr*> factors;
  append_factors(ca, factors);
  append_factors(cb, factors);
  return make_product_of(ka, std::move(factors));
}

int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// floor(a / b); nullptr for a zero divisor.
const DimExpr* make_floordiv(const DimExpr* a, const DimExpr* b) {
  if (b->op == DimOp::kConst) {
    const int64_t k = b->constant;
    if (k == 0) return nullptr;
    if (k == 1) return a;
    if (a->op == DimOp::kConst) return make_const(floor_div(a->constant, k));
    if (a->op == DimOp::kSum && k > 0) {
      bool exact = a->constant % k == 0;
      for (const auto& [t, f] : a->terms) exact = exact && f % k == 0;
      if (exact) {
        std::vector<std::pair<const DimExpr*, int64_t>> terms;
        for (const auto& [t, f] : a->terms) terms.emplace_back(t, f / k);
        return make_sum(terms, a->constant / k);
      }
    }
  }
  if (a == b) return make_const(1);
  // Cancel b's factors (and its coefficient) out of a's when they are all there.
  auto [ka, ca] = split_coefficient(a);
  auto [kb, cb] = split_coefficient(b);
  if (kb != 0 && ka % kb == 0 && (cb == nullptr || ca != nullptr)) {
    std::vector<const DimExpr*> num, den;
    append_factors(ca, num);
    append_factors(cb, den);
    bool all = true;
    for (const DimExpr* d : den) {
      auto it = std::find(num.begin(), num.end(), d);
      if (it == num.end()) {
        all = false;
        break;
      }
      num.erase(it);
    }
    if (all) return make_product_of(ka / kb, std::move(num));
  }
  DimExpr e;
  e.op = DimOp::kFloorDiv;
  e.factors = {a, b};
  return Interner::get().intern(std::move(e));
}

// An expression for a dim (constants too); nullptr for unknown.
const DimExpr* expr_of(const Dim& d) {
  if (d.is_known()) return make_const(d.value);
  return d.expr;
}

// A dim for an expression: constants become sizes (negative ones unknown).
Dim dim_of(const DimExpr* e) {
  if (!e) return Dim{};
  if (e->op == DimOp::kConst) return e->constant >= 0 ? Dim::known(e->constant) : Dim{};
  return Dim{-1, e};
}

std::optional<int64_t> evaluate(const DimExpr* e, const SymbolValues& values) {
  switch (e->op) {
    case DimOp::kConst: return e->constant;
    case DimOp::kSymbol: {
      auto it = values.find(e->name);
      if (it == values.end()) return std::nullopt;
      return it->second;
    }
    case DimOp::kSum: {
      int64_t s = e->constant;
      for (const auto& [t, k] : e->terms) {
        auto v = evaluate(t, values);
        if (!v) return std::nullopt;
        s += k * *v;
      }
      return s;
    }
    case DimOp::kProduct: {
      int64_t p = 1;
      for (const DimExpr* f : e->factors) {
        auto v = evaluate(f, values);
        if (!v || __builtin_mul_overflow(p, *v, &p)) return std::nullopt;
      }
      return p;
    }
    case DimOp::kFloorDiv: {
      auto a = evaluate(e->factors[0], values), b = evaluate(e->factors[1], values);
      if (!a || !b || *b == 0) return std::nullopt;
      return floor_div(*a, *b);
    }
  }
  return std::nullopt;
}

const DimExpr* substitute(const DimExpr* e, const SymbolValues& values) {
  switch (e->op) {
    case DimOp::kConst: return e;
    case DimOp::kSymbol: {
      auto it = values.find(e->name);
      return it == values.end() ? e : make_const(it->second);
    }
    case DimOp::kSum: {
      std::vector<std::pair<const DimExpr*, int64_t>> terms;
      for (const auto& [t, k] : e->terms) terms.emplace_back(substitute(t, values), k);
      return make_sum(terms, e->constant);
    }
    case DimOp::kProduct: {
      const DimExpr* p = make_const(1);
      for (const DimExpr* f : e->factors) {
        p = make_product(p, substitute(f, values));
        if (!p) return e;
      }
      return p;
    }
    case DimOp::kFloorDiv: {
      const DimExpr* q = make_floordiv(substitute(e->factors[0], values), substitute(e->factors[1], values));
      return q ? q : e;
    }
  }
  return e;
}

void collect_symbols(const DimExpr* e, std::vector<std::string>& out) {
  if (e->op == DimOp::kSymbol) out.push_back(e->name);
  for (const auto& [t, k] : e->terms) collect_symbols(t, out);
  for (const DimExpr* f : e->factors) collect_symbols(f, out);
}

using Bounds = std::pair<int64_t, int64_t>;
constexpr Bounds kAll = {-kUnbounded, kUnbounded};

int64_t sat_add(int64_t a, int64_t b) {
  if (a == kUnbounded || b == kUnbounded) return kUnbounded;
  if (a == -kUnbounded || b == -kUnbounded) return -kUnbounded;
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? (a > 0 ? kUnbounded : -kUnbounded) : r;
}

int64_t sat_mul(int64_t a, int64_t k) {
  if (a == 0 || k == 0) return 0;
  const bool neg = (a < 0) != (k < 0);
  if (a == kUnbounded || a == -kUnbounded || k == kUnbounded || k == -kUnbounded) return neg ? -kUnbounded : kUnbounded;
  int64_t r;
  return __builtin_mul_overflow(a, k, &r) ? (neg ? -kUnbounded : kUnbounded) : r;
}

Bounds bounds(const DimExpr* e, const DimRanges& ranges) {
  switch (e->op) {
    case DimOp::kConst: return {e->constant, e->constant};
    case DimOp::kSymbol: {
      // A model's dim symbol is a size, >= 0.
      auto it = ranges.find(e->name);
      return it == ranges.end() ? Bounds{0, kUnbounded} : it->second;
    }
    case DimOp::kSum: {
      int64_t lo = e->constant, hi = e->constant;
      for (const auto& [t, k] : e->terms) {
        const Bounds b = bounds(t, ranges);
        lo = sat_add(lo, k > 0 ? sat_mul(b.first, k) : sat_mul(b.second, k));
        hi = sat_add(hi, k > 0 ? sat_mul(b.second, k) : sat_mul(b.first, k));
      }
      return {lo, hi};
    }
    case DimOp::kProduct: {
      // Only a product of non-negative factors is bounded here (a factor may be a difference).
      int64_t lo = 1, hi = 1;
      for (const DimExpr* f : e->factors) {
        const Bounds b = bounds(f, ranges);
        if (b.first < 0) return kAll;
        lo = sat_mul(lo, b.first);
        hi = sat_mul(hi, b.second);
      }
      return {lo, hi};
    }
    case DimOp::kFloorDiv: {
      const Bounds a = bounds(e->factors[0], ranges), b = bounds(e->factors[1], ranges);
      if (a.first < 0 || b.first <= 0) return kAll;
      return {b.second == kUnbounded ? 0 : a.first / b.second, a.second == kUnbounded ? kUnbounded : a.second / b.first};
    }
  }
  return kAll;
}

}  // namespace

Dim Dim::sym(std::string_view name) { return Dim{-1, make_symbol(name)}; }

const std::string& Dim::sym_name() const {
  static const std::string empty;
  return is_symbol() && expr->op == DimOp::kSymbol ? expr->name : empty;
}

std::string Dim::str() const { return is_known() ? std::to_string(value) : expr ? expr->text : "?"; }

Dim dim_add(const Dim& a, const Dim& b) { return linear_add(a, b, 1); }
Dim dim_sub(const Dim& a, const Dim& b) { return linear_add(a, b, -1); }

Dim linear_add(const Dim& a, const Dim& b, int64_t sign) {
  const DimExpr *ea = expr_of(a), *eb = expr_of(b);
  if (!ea || !eb) return Dim{};
  return dim_of(make_sum({{ea, 1}, {eb, sign}}, 0));
}

Dim linear_scale(const Dim& a, int64_t k) {
  const DimExpr* ea = expr_of(a);
  if (!ea) return Dim{};
  return dim_of(make_sum({{ea, k}}, 0));
}

Dim dim_mul(const Dim& a, const Dim& b) {
  const DimExpr *ea = expr_of(a), *eb = expr_of(b);
  if (!ea || !eb) return Dim{};
  return dim_of(make_product(ea, eb));
}

Dim dim_floordiv(const Dim& a, const Dim& b) {
  const DimExpr *ea = expr_of(a), *eb = expr_of(b);
  if (!ea || !eb) return Dim{};
  return dim_of(make_floordiv(ea, eb));
}

std::optional<Dim> dim_product_ratio(const Dim& factor, const std::vector<Dim>& num, const std::vector<Dim>& den) {
  Dim n = factor, d = Dim::known(1);
  for (const Dim& x : num) n = dim_mul(n, x);
  for (const Dim& x : den) d = dim_mul(d, x);
  if (!n.expr && !n.is_known()) return std::nullopt;
  if (!d.expr && !d.is_known()) return std::nullopt;
  const DimExpr* q = make_floordiv(expr_of(n), expr_of(d));
  // Exact only when the division simplified away (no floor left at the top).
  if (!q || q->op == DimOp::kFloorDiv) return std::nullopt;
  if (q->op == DimOp::kConst) {
    if (d.is_known() && n.is_known() && (d.value == 0 || n.value % d.value != 0)) return std::nullopt;
  }
  Dim r = dim_of(q);
  if (!r.is_known() && !r.is_symbol()) return std::nullopt;
  return r;
}

std::optional<std::pair<int64_t, int64_t>> dim_bounds(const Dim& d, const DimRanges& ranges) {
  const DimExpr* e = expr_of(d);
  if (!e) return std::nullopt;
  return bounds(e, ranges);
}

std::optional<int64_t> dim_evaluate(const Dim& d, const SymbolValues& values) {
  const DimExpr* e = expr_of(d);
  if (!e) return std::nullopt;
  return evaluate(e, values);
}

Dim dim_substitute(const Dim& d, const SymbolValues& values) {
  if (!d.is_symbol()) return d;
  return dim_of(substitute(d.expr, values));
}

const DimExpr* dim_expr(const Dim& d) { return expr_of(d); }
Dim dim_from_expr(const DimExpr* e) { return dim_of(e); }

std::vector<std::string> dim_symbols(const Dim& d) {
  std::vector<std::string> out;
  if (d.is_symbol()) collect_symbols(d.expr, out);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace kiln
