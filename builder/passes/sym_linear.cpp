#include "builder/passes/sym_linear.h"

#include <cctype>
#include <map>
#include <vector>

namespace kiln {

namespace {

bool plain_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != ':') return false;
  return true;
}

bool all_digits(const std::string& s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// Parses the inside of "( ... )" as written by from_linear; nullopt when it is not that form.
std::optional<LinearDim> parse_sum(const std::string& s) {
  LinearDim l;
  size_t i = 0;
  bool first = true;
  while (i < s.size()) {
    int64_t sign = 1;
    if (s[i] == '+' || s[i] == '-') {
      sign = s[i] == '-' ? -1 : 1;
      ++i;
    } else if (!first) {
      return std::nullopt;
    }
    first = false;
    size_t j = i;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
    int64_t factor = 1;
    std::string atom;
    if (j > i && (j == s.size() || s[j] == '+' || s[j] == '-')) {  // a constant
      const std::string num = s.substr(i, j - i);
      if (!all_digits(num)) return std::nullopt;
      l.constant += sign * std::stoll(num);
      i = j;
      continue;
    }
    if (j > i) {
      if (s[j] != '*' || !all_digits(s.substr(i, j - i))) return std::nullopt;
      factor = std::stoll(s.substr(i, j - i));
      i = j + 1;
    }
    if (i < s.size() && s[i] == '[') {
      int depth = 0;
      size_t k = i;
      for (; k < s.size(); ++k) {
        depth += s[k] == '[' ? 1 : s[k] == ']' ? -1 : 0;
        if (depth == 0) break;
      }
      if (k == s.size()) return std::nullopt;
      atom = s.substr(i + 1, k - i - 1);
      i = k + 1;
    } else {
      size_t k = i;
      while (k < s.size() && s[k] != '+' && s[k] != '-') ++k;
      atom = s.substr(i, k - i);
      if (!plain_identifier(atom)) return std::nullopt;
      i = k;
    }
    if (atom.empty()) return std::nullopt;
    l.terms[atom] += sign * factor;
    if (l.terms[atom] == 0) l.terms.erase(atom);
  }
  return l;
}

std::string atom_text(const std::string& a) { return plain_identifier(a) ? a : "[" + a + "]"; }

}  // namespace

std::optional<LinearDim> to_linear(const Dim& d) {
  LinearDim l;
  if (d.is_known()) {
    l.constant = d.value;
    return l;
  }
  if (!d.is_symbol()) return std::nullopt;
  const std::string& s = d.symbol;
  if (s.size() > 2 && s.front() == '(' && s.back() == ')')
    if (auto p = parse_sum(s.substr(1, s.size() - 2))) return p;
  l.terms[s] = 1;
  return l;
}

Dim from_linear(const LinearDim& l) {
  if (l.terms.empty()) return l.constant >= 0 ? Dim::known(l.constant) : Dim{};
  if (l.terms.size() == 1 && l.constant == 0 && l.terms.begin()->second == 1) return Dim::sym(l.terms.begin()->first);
  std::string s;
  for (const auto& [atom, k] : l.terms) {
    s += k < 0 ? "-" : (s.empty() ? "" : "+");
    if (k != 1 && k != -1) s += std::to_string(k < 0 ? -k : k) + "*";
    s += atom_text(atom);
  }
  if (l.constant) s += (l.constant < 0 ? "-" : "+") + std::to_string(l.constant < 0 ? -l.constant : l.constant);
  return Dim::sym("(" + s + ")");
}

Dim linear_add(const Dim& a, const Dim& b, int64_t sign) {
  auto la = to_linear(a), lb = to_linear(b);
  if (!la || !lb) return Dim{};
  for (const auto& [atom, k] : lb->terms) {
    la->terms[atom] += sign * k;
    if (la->terms[atom] == 0) la->terms.erase(atom);
  }
  la->constant += sign * lb->constant;
  return from_linear(*la);
}

Dim linear_scale(const Dim& a, int64_t k) {
  auto l = to_linear(a);
  if (!l) return Dim{};
  if (k == 0) return Dim::known(0);
  for (auto& [atom, f] : l->terms) f *= k;
  l->constant *= k;
  return from_linear(*l);
}

namespace {
// A product of dims as a number times symbols with exponents.
struct Monomial {
  int64_t coeff = 1;
  std::map<std::string, int> powers;
};

// Multiplies m by d (exponent +1) or divides it (-1, coefficients collected in `den`).
bool mul_dim(Monomial& m, int64_t& den, const Dim& d, int sign) {
  int64_t k = 1;
  if (d.is_known()) {
    k = d.value;
  } else {
    auto l = to_linear(d);
    if (!l) return false;
    if (l->terms.size() == 1 && l->constant == 0) {
      k = l->terms.begin()->second;
      m.powers[l->terms.begin()->first] += sign;
    } else {
      m.powers[d.symbol] += sign;  // a sum is one opaque factor
    }
  }
  if (k <= 0 || k > (int64_t{1} << 31)) return false;  // keeps the products far from overflow
  (sign > 0 ? m.coeff : den) *= k;
  return m.coeff < (int64_t{1} << 62) && den < (int64_t{1} << 62);
}
}  // namespace

std::optional<Dim> dim_product_ratio(const Dim& factor, const std::vector<Dim>& num, const std::vector<Dim>& den) {
  Monomial m;
  int64_t d = 1;
  if (!mul_dim(m, d, factor, 1)) return std::nullopt;
  for (const Dim& x : num)
    if (!mul_dim(m, d, x, 1)) return std::nullopt;
  for (const Dim& x : den)
    if (!mul_dim(m, d, x, -1)) return std::nullopt;
  if (m.coeff % d != 0) return std::nullopt;
  LinearDim l;
  for (const auto& [atom, p] : m.powers) {
    if (p == 0) continue;
    if (p != 1 || !l.terms.empty()) return std::nullopt;
    l.terms[atom] = m.coeff / d;
  }
  if (l.terms.empty()) l.constant = m.coeff / d;
  return from_linear(l);
}

std::optional<std::pair<int64_t, int64_t>> dim_bounds(const Dim& d, const DimRanges& ranges) {
  auto l = to_linear(d);
  if (!l) return std::nullopt;
  // Sums of at most a few terms of dims far below 2^62: plain arithmetic cannot overflow.
  int64_t lo = l->constant, hi = l->constant;
  bool hi_unbounded = false, lo_unbounded = false;
  for (const auto& [atom, k] : l->terms) {
    auto it = ranges.find(atom);
    // A model's dim symbol is a size, >= 0. An opaque derived atom (a product or quotient of
    // expressions, written with parentheses) may hide a negative difference: no lower bound.
    if (it == ranges.end() && atom.find('(') != std::string::npos) {
      (k > 0 ? lo_unbounded : hi_unbounded) = true;
      (k > 0 ? hi_unbounded : lo_unbounded) = true;
      continue;
    }
    const int64_t amin = it == ranges.end() ? 0 : it->second.first;
    const bool bounded = it != ranges.end();
    const int64_t amax = bounded ? it->second.second : 0;
    if (k > 0) {
      lo += k * amin;
      if (bounded) hi += k * amax;
      else hi_unbounded = true;
    } else {
      hi += k * amin;
      if (bounded) lo += k * amax;
      else lo_unbounded = true;
    }
  }
  return std::make_pair(lo_unbounded ? -kUnbounded : lo, hi_unbounded ? kUnbounded : hi);
}

}  // namespace kiln
