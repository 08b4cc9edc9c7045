// Spearman's rho and Kendall's tau (rank_correlation.h). Written here rather than taken from a
// library: no C++ package of Debian's computes them with scipy's tie rules.
#include "metrics/regression/rank_correlation.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>

namespace kindling {
namespace detail {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A NaN makes the correlation NaN (scipy's nan_policy='propagate'); it would also break sorting.
bool any_nan(const std::vector<double>& x, const std::vector<double>& y) {
  const auto nan = [](double v) { return std::isnan(v); };
  return std::any_of(x.begin(), x.end(), nan) || std::any_of(y.begin(), y.end(), nan);
}

// 1-based ranks of v, tied values taking the mean of the ranks they span.
std::vector<double> mean_ranks(const std::vector<double>& v) {
  std::vector<std::size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return v[a] < v[b]; });
  std::vector<double> ranks(v.size());
  for (std::size_t first = 0; first < order.size();) {
    std::size_t last = first + 1;
    while (last < order.size() && v[order[last]] == v[order[first]]) ++last;
    const double mean = 0.5 * static_cast<double>(first + 1 + last);  // ranks first+1 .. last
    for (std::size_t k = first; k < last; ++k) ranks[order[k]] = mean;
    first = last;
  }
  return ranks;
}

// Pairs among runs of equal neighbours of the sorted indices `order` (equal by `same`).
template <typename Same>
int64_t tied_pairs(const std::vector<std::size_t>& order, Same same) {
  int64_t pairs = 0;
  for (std::size_t first = 0; first < order.size();) {
    std::size_t last = first + 1;
    while (last < order.size() && same(order[first], order[last])) ++last;
    const auto run = static_cast<int64_t>(last - first);
    pairs += run * (run - 1) / 2;
    first = last;
  }
  return pairs;
}

// Dense ranks (0-based: equal values the same rank, no gaps) of v; `distinct` gets how many.
std::vector<std::size_t> dense_ranks(const std::vector<double>& v, std::size_t& distinct) {
  std::vector<double> sorted(v);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  distinct = sorted.size();
  std::vector<std::size_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    out[i] = static_cast<std::size_t>(std::lower_bound(sorted.begin(), sorted.end(), v[i]) - sorted.begin());
  }
  return out;
}

// Pairs i < j of `ranks` with ranks[i] > ranks[j] (a Fenwick tree over the ranks).
int64_t inversions(const std::vector<std::size_t>& ranks, std::size_t distinct) {
  std::vector<int64_t> tree(distinct + 1, 0);
  int64_t count = 0;
  for (std::size_t seen = 0; seen < ranks.size(); ++seen) {
    int64_t not_above = 0;  // earlier ranks <= this one
    for (std::size_t i = ranks[seen] + 1; i > 0; i -= i & (~i + 1)) not_above += tree[i];
    count += static_cast<int64_t>(seen) - not_above;
    for (std::size_t i = ranks[seen] + 1; i <= distinct; i += i & (~i + 1)) ++tree[i];
  }
  return count;
}

}  // namespace

double spearman_rho(const std::vector<double>& x, const std::vector<double>& y) {
  const std::size_t n = x.size();
  if (n < 2 || any_nan(x, y)) return kNaN;
  const std::vector<double> rx = mean_ranks(x), ry = mean_ranks(y);
  const double mean = 0.5 * static_cast<double>(n + 1);  // of any ranks of n values
  double xy = 0, xx = 0, yy = 0;
  for (std::size_t i = 0; i < n; ++i) {
    xy += (rx[i] - mean) * (ry[i] - mean);
    xx += (rx[i] - mean) * (rx[i] - mean);
    yy += (ry[i] - mean) * (ry[i] - mean);
  }
  if (xx == 0 || yy == 0) return kNaN;
  return std::clamp(xy / std::sqrt(xx * yy), -1.0, 1.0);
}

double kendall_tau(const std::vector<double>& x, const std::vector<double>& y, bool variant_c) {
  const std::size_t n = x.size();
  if (any_nan(x, y)) return kNaN;
  std::size_t x_distinct = 0, y_distinct = 0;
  const std::vector<std::size_t> xr = dense_ranks(x, x_distinct), yr = dense_ranks(y, y_distinct);
  // Sorted by x, then y: a pair out of order in y there is discordant (x strictly below).
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return xr[a] != xr[b] ? xr[a] < xr[b] : yr[a] < yr[b]; });
  std::vector<std::size_t> y_in_order(n);
  for (std::size_t k = 0; k < n; ++k) y_in_order[k] = yr[order[k]];
  const int64_t discordant = inversions(y_in_order, y_distinct);
  const int64_t both_tied =
      tied_pairs(order, [&](std::size_t a, std::size_t b) { return xr[a] == xr[b] && yr[a] == yr[b]; });
  const int64_t x_tied = tied_pairs(order, [&](std::size_t a, std::size_t b) { return xr[a] == xr[b]; });
  std::vector<std::size_t> by_y(order);
  std::sort(by_y.begin(), by_y.end(), [&](std::size_t a, std::size_t b) { return yr[a] < yr[b]; });
  const int64_t y_tied = tied_pairs(by_y, [&](std::size_t a, std::size_t b) { return yr[a] == yr[b]; });
  const auto pairs = static_cast<int64_t>(n) * (static_cast<int64_t>(n) - 1) / 2;
  if (x_tied == pairs || y_tied == pairs) return kNaN;  // also fewer than 2 values
  // pairs = concordant + discordant + (x_tied - both_tied) + (y_tied - both_tied) + both_tied
  const auto difference = static_cast<double>(pairs - x_tied - y_tied + both_tied - 2 * discordant);
  double tau = 0;
  if (variant_c) {
    const auto m = static_cast<double>(std::min(x_distinct, y_distinct));
    tau = 2 * difference / (static_cast<double>(n) * static_cast<double>(n) * (m - 1) / m);
  } else {
    tau = difference / std::sqrt(static_cast<double>(pairs - x_tied)) / std::sqrt(static_cast<double>(pairs - y_tied));
  }
  return std::clamp(tau, -1.0, 1.0);
}

}  // namespace detail
}  // namespace kindling
