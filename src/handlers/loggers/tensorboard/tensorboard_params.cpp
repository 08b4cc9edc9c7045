// The parameter handlers (ignite's WeightsScalarHandler, GradsScalarHandler,
// WeightsHistHandler, GradsHistHandler) and TensorboardLogger::add_histogram.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "common/strings.h"
#include "handlers/loggers/tensorboard/event_file_sink.h"
#include "handlers/loggers/logger_events.h"
#include "kindling/error.h"
#include "kindling/handlers/loggers/tensorboard.h"
#include "kindling/log.h"

namespace kindling {
namespace handlers {
namespace {

using engine::Engine;

// The parameters of `model` that a handler logs: (name with '/' for '.', parameter).
using NamedParams = std::vector<std::pair<std::string, at::Tensor>>;

bool param_whitelisted(const std::string& name, const std::vector<std::string>& whitelist) {
  if (whitelist.empty()) return true;
  for (const std::string& prefix : whitelist) {
    if (name.compare(0, prefix.size(), prefix) == 0) return true;
  }
  return false;
}

// Throws kindling::UsageError naming the parameters when the whitelist keeps none.
NamedParams select_params(const torch::nn::Module& model, const std::vector<std::string>& whitelist,
                          const std::string& where) {
  NamedParams out;
  std::vector<std::string> all;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    all.push_back(item.key());
    if (!param_whitelisted(item.key(), whitelist)) continue;
    std::string name = item.key();
    for (char& c : name) c = c == '.' ? '/' : c;
    out.emplace_back(std::move(name), item.value());
  }
  KINDLING_CHECK(!out.empty(), where, ": no parameter to log: the model has ",
                 all.empty() ? std::string("no parameter") : "the parameters " + kindling::detail::join(all),
                 whitelist.empty()
                     ? std::string()
                     : " and none starts with one of the whitelist's " + kindling::detail::join(whitelist),
                 "; pass the model whose parameters you want logged, or name their prefixes in whitelist");
  return out;
}

std::string prefixed_tag(const std::string& tag, const std::string& rest) {
  return tag.empty() ? rest : tag + "/" + rest;
}

// The tensor a handler reads: the parameter, or its gradient (undefined when it has none),
// detached (ignite passes p.data and p.grad): a user's reduction then cannot record autograd
// history on the live parameter or change it through the graph.
at::Tensor param_or_grad(const at::Tensor& param, bool grads) {
  const at::Tensor t = grads ? param.grad() : param;
  return t.defined() ? t.detach() : t;
}

// numpy.histogram's buckets of `x` (n finite values) between h.min and h.max: `bins` equal
// widths, edges min + width * (b + 1) (the last edge is max itself), each value counted in
// the bucket whose edges hold it, its lower edge included (the last bucket's upper edge
// too). The bucket index guessed from (x - min) / width is clamped in double before the cast
// (casting a NaN, or a value beyond int64_t's range, is undefined behaviour), then moved
// while rounding left it on the wrong side of an edge, so that the counts agree with the
// edges written (numpy corrects its guess the same way, by one bucket). One bucket when the
// width is not a positive finite number: all values equal, a range so narrow (subnormal)
// that the width rounds to 0, or so wide (e.g. -1e308 to 1e308) that max - min overflows.
void fill_buckets(detail::HistogramSummary& h, const double* x, int64_t n, int bins) {
  const double width = (h.max - h.min) / bins;
  if (!(std::isfinite(width) && width > 0)) bins = 1;
  h.bucket.assign(static_cast<std::size_t>(bins), 0.0);
  h.bucket_limit.clear();
  for (int b = 0; b < bins; ++b) h.bucket_limit.push_back(b + 1 == bins ? h.max : h.min + width * (b + 1));
  if (bins == 1) {
    h.bucket[0] = static_cast<double>(n);
    return;
  }
  const std::vector<double>& upper = h.bucket_limit;
  for (int64_t i = 0; i < n; ++i) {
    double guess = (x[i] - h.min) / width;
    guess = guess >= 0 ? std::min(guess, static_cast<double>(bins - 1)) : 0.0;  // also NaN -> 0
    std::size_t b = static_cast<std::size_t>(guess);
    while (b > 0 && x[i] < upper[b - 1]) --b;              // below its lower edge
    while (b + 1 < upper.size() && x[i] >= upper[b]) ++b;  // at or above its upper edge
    h.bucket[b] += 1.0;
  }
}

// The histogram of the finite elements of `values`, written to `file` under `tag`; non-finite
// elements are left out with one warning per tag and file.
void write_histogram(detail::EventFileSink& file, const std::string& tag, const at::Tensor& values, int bins,
                     int64_t step) {
  const at::Tensor all = values.detach().to(at::kCPU, at::kDouble).contiguous().reshape({-1});
  const at::Tensor finite = all.index({at::isfinite(all)});
  if (finite.numel() < all.numel() && file.first_time("non-finite " + tag)) {
    kindling::log(LogLevel::kWarning, "kindling::handlers::TensorboardLogger: the histogram '" + tag + "' left out " +
                                          std::to_string(all.numel() - finite.numel()) + " of " +
                                          std::to_string(all.numel()) +
                                          " elements that are NaN or infinite (told once per tag)");
  }
  if (finite.numel() == 0) return;
  const double* x = finite.data_ptr<double>();
  const int64_t n = finite.numel();
  detail::HistogramSummary h;
  h.min = h.max = x[0];
  for (int64_t i = 0; i < n; ++i) {
    h.min = std::min(h.min, x[i]);
    h.max = std::max(h.max, x[i]);
    h.sum += x[i];
    h.sum_squares += x[i] * x[i];
  }
  h.num = static_cast<double>(n);
  fill_buckets(h, x, n, bins);
  file.write_histogram(tag, h, step);
}

void check_hist_bins(int bins, const std::string& where) {
  KINDLING_CHECK(bins >= 1, where, ": bins must be at least 1, got ", bins, "; pass e.g. 30");
}

}  // namespace

ParamReduction ParamReduction::norm() {
  return {"norm", [](const at::Tensor& t) { return t.detach().to(at::kDouble).norm().item<double>(); }};
}

namespace {
// The handler of attach_{weights,grads}_scalar_handler.
engine::HandlerHandle attach_param_scalars(Engine& engine, const engine::EventsList& events,
                                           std::shared_ptr<detail::ScalarSink> sink, NamedParams params,
                                           ParamReduction reduction, const std::string& tag, bool grads) {
  const std::string prefix = prefixed_tag(tag, std::string(grads ? "grads_" : "weights_") + reduction.name);
  return engine.add_event_handler(
      events, [sink, list = events.events(), params = std::move(params), reduction, prefix, grads](Engine& e) {
        if (!sink) return;  // inert on ranks other than 0
        const int64_t step = e.state().counter(detail::firing_event(e, list));
        for (const auto& [name, param] : params) {
          const at::Tensor t = param_or_grad(param, grads);
          if (t.defined()) sink->write(prefix, name, reduction.reduce(t), step);
        }
      });
}
}  // namespace

engine::HandlerHandle BaseLogger::attach_weights_scalar_handler(Engine& engine, const engine::EventsList& events,
                                                                const torch::nn::Module& model,
                                                                ParamReduction reduction, const std::string& tag,
                                                                std::vector<std::string> whitelist) {
  const std::string where = "kindling::handlers::" + who_ + "::attach_weights_scalar_handler";
  detail::check_counters(events, where, "");
  KINDLING_CHECK(static_cast<bool>(reduction.reduce), where,
                 ": the reduction has no function; pass ParamReduction::norm() or {name, function}");
  return attach_param_scalars(engine, events, sink_, select_params(model, whitelist, where), std::move(reduction), tag,
                              false);
}

engine::HandlerHandle BaseLogger::attach_grads_scalar_handler(Engine& engine, const engine::EventsList& events,
                                                              const torch::nn::Module& model, ParamReduction reduction,
                                                              const std::string& tag,
                                                              std::vector<std::string> whitelist) {
  const std::string where = "kindling::handlers::" + who_ + "::attach_grads_scalar_handler";
  detail::check_counters(events, where, "");
  KINDLING_CHECK(static_cast<bool>(reduction.reduce), where,
                 ": the reduction has no function; pass ParamReduction::norm() or {name, function}");
  return attach_param_scalars(engine, events, sink_, select_params(model, whitelist, where), std::move(reduction), tag,
                              true);
}

void TensorboardLogger::add_histogram(const std::string& tag, const at::Tensor& values, int64_t step, int bins) {
  const std::string where = "kindling::handlers::TensorboardLogger::add_histogram";
  check_hist_bins(bins, where);
  KINDLING_CHECK(values.defined(), where, ": the tensor for '", tag,
                 "' is undefined (a default-constructed at::Tensor); pass a tensor with data");
  detail::check_utf8_tag(tag, where);
  if (events_) write_histogram(*events_, tag, values, bins, step);
}

namespace {
// The handler of attach_{weights,grads}_hist_handler.
engine::HandlerHandle attach_param_histograms(Engine& engine, const engine::EventsList& events,
                                              std::shared_ptr<detail::EventFileSink> file, NamedParams params,
                                              const std::string& tag, int bins, bool grads) {
  const std::string prefix = prefixed_tag(tag, grads ? "grads" : "weights");
  return engine.add_event_handler(
      events, [file, list = events.events(), params = std::move(params), prefix, bins, grads](Engine& e) {
        if (!file) return;  // inert on ranks other than 0
        const int64_t step = e.state().counter(detail::firing_event(e, list));
        for (const auto& [name, param] : params) {
          const at::Tensor t = param_or_grad(param, grads);
          if (t.defined()) write_histogram(*file, prefix + "/" + name, t, bins, step);
        }
      });
}
}  // namespace

engine::HandlerHandle TensorboardLogger::attach_weights_hist_handler(Engine& engine, const engine::EventsList& events,
                                                                     const torch::nn::Module& model,
                                                                     const std::string& tag,
                                                                     std::vector<std::string> whitelist, int bins) {
  const std::string where = "kindling::handlers::TensorboardLogger::attach_weights_hist_handler";
  check_hist_bins(bins, where);
  detail::check_counters(events, where, "");
  return attach_param_histograms(engine, events, events_, select_params(model, whitelist, where), tag, bins, false);
}

engine::HandlerHandle TensorboardLogger::attach_grads_hist_handler(Engine& engine, const engine::EventsList& events,
                                                                   const torch::nn::Module& model,
                                                                   const std::string& tag,
                                                                   std::vector<std::string> whitelist, int bins) {
  const std::string where = "kindling::handlers::TensorboardLogger::attach_grads_hist_handler";
  check_hist_bins(bins, where);
  detail::check_counters(events, where, "");
  return attach_param_histograms(engine, events, events_, select_params(model, whitelist, where), tag, bins, true);
}

}  // namespace handlers
}  // namespace kindling
