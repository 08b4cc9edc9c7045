#pragma once
// Rank correlations of paired samples, as scipy.stats computes them (which ignite's
// SpearmanRankCorrelation and KendallRankCorrelation call): Spearman's rho and Kendall's tau-b
// and tau-c, ties included, in float64. Internal to src/metrics/.
#include <vector>

namespace kindling {
namespace detail {

/// Spearman's rho of x and y (the same length): the Pearson correlation of their ranks, tied
/// values taking the mean of their ranks (scipy.stats.spearmanr). NaN when x or y is constant, holds a
/// NaN or fewer than 2 values. Local; does not throw.
double spearman_rho(const std::vector<double>& x, const std::vector<double>& y);

/// Kendall's tau of x and y (the same length), variant b (ties adjusted:
/// (concordant - discordant) / sqrt((pairs - x ties) (pairs - y ties))) or c (Stuart's:
/// 2 (concordant - discordant) / (n^2 (m - 1) / m), m the smaller number of distinct values),
/// as scipy.stats.kendalltau; O(n log n). NaN when x or y is constant, holds a NaN or fewer
/// than 2 values. Local; does not throw.
double kendall_tau(const std::vector<double>& x, const std::vector<double>& y, bool variant_c);

}  // namespace detail
}  // namespace kindling
