// The exact computation the ranking metrics share (see ranking_curve.h).
#include "metrics/ranking/ranking_curve.h"

#include <ATen/ATen.h>

#include <sstream>

#include "kindling/error.h"

namespace kindling {
namespace detail {

namespace {

// A (N, 1) tensor as (N,), as EpochMetric stores it.
at::Tensor ranking_squeezed(const at::Tensor& t) { return t.dim() == 2 && t.size(1) == 1 ? t.squeeze(1) : t; }

const char* ranking_task_name(RankingTask task) {
  switch (task) {
    case RankingTask::kBinary: return "binary";
    case RankingTask::kMulticlass: return "multiclass";
    case RankingTask::kMultilabel: return "multilabel";
  }
  return "?";
}

// The first element of `values` where `bad` holds, as text ("2", "0.5").
std::string ranking_first_bad(const at::Tensor& values, const at::Tensor& bad) {
  std::ostringstream out;
  out << values.masked_select(bad).flatten()[0].item<double>();
  return out.str();
}

// Where the first element of `bad` lies, for messages: the sample's index among the epoch's
// samples, which compute_fn receives gathered from every rank in rank order.
std::string ranking_where(const at::Tensor& bad) {
  std::ostringstream out;
  out << " (sample " << at::nonzero(bad)[0][0].item<int64_t>() << " of the " << bad.size(0)
      << " stored by all ranks, in rank order)";
  return out.str();
}

// Throws unless y holds what `task` expects: 0 and 1, or class indices in [0, classes).
void ranking_check_targets(const at::Tensor& y, RankingTask task, int64_t classes, const std::string& who) {
  if (y.numel() == 0) return;
  const at::Tensor t = y.to(at::kDouble);
  if (task == RankingTask::kMulticlass) {
    const at::Tensor bad = (t < 0).logical_or(t >= static_cast<double>(classes)).logical_or(t != t.trunc());
    KINDLING_CHECK(!bad.any().item<bool>(), who, ": multiclass targets y should be class indices in [0, ", classes,
                   ") (y_pred has ", classes, " columns of scores), but y holds ", ranking_first_bad(t, bad),
                   ranking_where(bad), "; for multilabel input give y the shape of y_pred, with 0 and 1");
    return;
  }
  const at::Tensor bad = (t != 0).logical_and(t != 1);
  KINDLING_CHECK(!bad.any().item<bool>(), who, ": ", ranking_task_name(task),
                 " targets y should be 0 or 1, but y holds ", ranking_first_bad(t, bad), ranking_where(bad),
                 task == RankingTask::kBinary ? "; for class indices give y_pred every class's score, of shape [N, C]"
                                              : "; for class indices give y of shape [N]");
}

}  // namespace

RankingTask ranking_task(const at::Tensor& y_pred, const at::Tensor& y, const std::string& who, bool binary_only,
                         bool check_values) {
  const at::Tensor p = ranking_squeezed(y_pred), t = ranking_squeezed(y);
  KINDLING_CHECK(!at::isComplexType(p.scalar_type()) && !at::isComplexType(t.scalar_type()), who,
                 ": y_pred and y should be real, but they are ", p.scalar_type(), " and ", t.scalar_type());
  KINDLING_CHECK((p.dim() == 1 || p.dim() == 2) && (t.dim() == 1 || t.dim() == 2), who,
                 ": y_pred should have shape [N] or [N, C] and y shape [N] or [N, C], but they have ", p.sizes(),
                 " and ", t.sizes());
  KINDLING_CHECK(p.size(0) == t.size(0), who, ": y_pred and y should hold as many samples, but they have shapes ",
                 p.sizes(), " and ", t.sizes());
  RankingTask task = RankingTask::kBinary;
  if (p.dim() == 2) task = t.dim() == 1 ? RankingTask::kMulticlass : RankingTask::kMultilabel;
  KINDLING_CHECK(p.dim() == 2 || t.dim() == 1, who, ": binary scores y_pred of shape ", p.sizes(),
                 " pair with targets y of shape [N], but y has shape ", t.sizes(),
                 "; for multilabel input give y_pred of shape [N, C] as well");
  KINDLING_CHECK(task != RankingTask::kMultilabel || p.sizes() == t.sizes(), who,
                 ": multilabel targets y should have the shape of y_pred, ", p.sizes(), ", but have ", t.sizes());
  KINDLING_CHECK(!binary_only || task == RankingTask::kBinary, who,
                 " takes binary input only: y_pred of shape [N] (the positive class's scores) and y of shape [N] "
                 "in {0, 1}, but got ",
                 ranking_task_name(task), " input (y_pred ", p.sizes(), ", y ", t.sizes(),
                 "); use output_transform to pick one class, e.g. [c](const Value& o) { return Value{o[0].select(1, "
                 "c), o[1] == c}; }");
  if (!check_values) return task;
  if (at::isFloatingType(p.scalar_type()) && p.numel() > 0) {
    const at::Tensor bad = at::isfinite(p).logical_not();
    KINDLING_CHECK(!bad.any().item<bool>(), who, ": y_pred should hold finite scores, but it holds ",
                   ranking_first_bad(p.to(at::kDouble), bad), ranking_where(bad),
                   "; check the model's output (or its output_transform)");
  }
  ranking_check_targets(t, task, p.dim() == 2 ? p.size(1) : 2, who);
  return task;
}

RankingCounts ranking_counts(const at::Tensor& scores, const at::Tensor& positive) {
  // Sort by score, highest first; a threshold sits at the last sample of each run of equal
  // scores, so that tied samples enter the positive predictions together.
  const auto sorted = at::sort(scores.to(at::kDouble), /*stable=*/true, /*dim=*/0, /*descending=*/true);
  const at::Tensor& s = std::get<0>(sorted);
  const at::Tensor hits = positive.index_select(0, std::get<1>(sorted)).to(at::kDouble);
  const int64_t n = s.size(0);
  const at::Tensor last_of_run = at::nonzero(s.slice(0, 1) != s.slice(0, 0, n - 1)).reshape({-1});
  const at::Tensor index = at::cat({last_of_run, at::full({1}, n - 1, last_of_run.options())});
  RankingCounts c;
  c.thresholds = s.index_select(0, index);
  c.tps = at::cumsum(hits, 0).index_select(0, index);  // integers: exact in float64 below 2^53
  c.fps = (index + 1).to(at::kDouble) - c.tps;
  c.positives = c.tps[-1].item<double>();
  c.negatives = c.fps[-1].item<double>();
  return c;
}

std::vector<RankingColumn> ranking_columns(const at::Tensor& y_pred, const at::Tensor& y, RankingTask task,
                                           bool micro) {
  const at::Tensor p = ranking_squeezed(y_pred), t = ranking_squeezed(y);
  if (task == RankingTask::kBinary) return {{p, t != 0, ""}};
  const int64_t classes = p.size(1);
  // (N, C) bool: whether sample n is a positive of class (label) c.
  const at::Tensor positive = task == RankingTask::kMulticlass
                                  ? t.to(at::kLong).unsqueeze(1) == at::arange(classes, t.options().dtype(at::kLong))
                                  : t != 0;
  if (micro) return {{p.reshape({-1}), positive.reshape({-1}), "the micro average"}};
  std::vector<RankingColumn> out;
  for (int64_t c = 0; c < classes; ++c) {
    out.push_back({p.select(1, c), positive.select(1, c),
                   (task == RankingTask::kMulticlass ? "class " : "label ") + std::to_string(c)});
  }
  return out;
}

engine::Value ranking_average(const std::vector<double>& values, const std::vector<double>& positives,
                              metrics::RankingMetric::Average average) {
  using Average = metrics::RankingMetric::Average;
  if (values.size() == 1) return values[0];
  if (average == Average::kNone) return at::tensor(values, at::TensorOptions().dtype(at::kDouble));
  double sum = 0, weights = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double w = average == Average::kWeighted ? positives[i] : 1.0;
    sum += w * values[i];
    weights += w;
  }
  return weights == 0 ? 0.0 : sum / weights;
}

}  // namespace detail
}  // namespace kindling
