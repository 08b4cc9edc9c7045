// Bleu (kindling/metrics/bleu.h): modified n-gram precisions, brevity penalty and ignite's
// smoothing methods, per sentence (macro) or over the corpus (micro).
#include "kindling/metrics/bleu.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

namespace kindling {
namespace metrics {
namespace {

// The reference length closest to the candidate's (the shorter one on a tie).
int64_t closest_reference_length(const std::vector<TokenSequence>& references, int64_t candidate_length) {
  int64_t best = static_cast<int64_t>(references.front().size());
  for (const auto& r : references) {
    const auto length = static_cast<int64_t>(r.size());
    const int64_t d = std::llabs(length - candidate_length), best_d = std::llabs(best - candidate_length);
    if (d < best_d || (d == best_d && length < best)) best = length;
  }
  return best;
}

}  // namespace

Bleu::Bleu(int64_t ngram, Smooth smooth, OutputTransform output_transform, c10::Device device, Average average)
    : TokenMetric(std::move(output_transform), device), ngram_(ngram), smooth_(smooth), average_(average) {
  KINDLING_CHECK(ngram >= 1, "kindling::metrics::Bleu: the n-gram order must be at least 1, got ", ngram);
  if (average_ == Average::kMacro) {
    register_state("_sum_of_bleu", &sum_of_bleu_, Reshard::kSum);
    register_state("_num_sentences", &num_sentences_, Reshard::kSum);
  } else {
    register_state("p_numerators", &numerators_, Reshard::kSum);
    register_state("p_denominators", &denominators_, Reshard::kSum);
    register_state("hyp_length_sum", &hyp_length_, Reshard::kSum);
    register_state("ref_length_sum", &ref_length_, Reshard::kSum);
  }
  Bleu::reset();
}

void Bleu::reset() {
  const auto options = at::TensorOptions().dtype(at::kDouble).device(device());
  sum_of_bleu_ = at::zeros({}, options);
  num_sentences_ = 0;
  numerators_ = at::zeros({ngram_ + 1}, options);
  denominators_ = at::zeros({ngram_ + 1}, options);
  hyp_length_ = ref_length_ = 0;
}

void Bleu::add(const TokenBatch& batch) {
  for (std::size_t i = 0; i < batch.candidates.size(); ++i) {
    KINDLING_CHECK(!batch.references[i].empty(), "kindling::metrics::Bleu: candidate ", i,
                   " of the batch has no reference (a reference row of padding only is none)");
  }
  std::vector<double> numerators(static_cast<std::size_t>(ngram_ + 1)), denominators(numerators.size());
  double hyp = 0, ref = 0;
  for (std::size_t i = 0; i < batch.candidates.size(); ++i) {
    const TokenSequence& candidate = batch.candidates[i];
    std::vector<double> num(numerators.size(), 0.0), den(numerators.size(), 0.0);
    for (int64_t n = 1; n <= ngram_; ++n) {
      const auto [matches, total] = modified_precision(batch.references[i], candidate, n);
      num[static_cast<std::size_t>(n)] = static_cast<double>(matches);
      den[static_cast<std::size_t>(n)] = static_cast<double>(total);
    }
    const auto length = static_cast<double>(candidate.size());
    const auto closest =
        static_cast<double>(closest_reference_length(batch.references[i], static_cast<int64_t>(candidate.size())));
    if (average_ == Average::kMacro) {
      sum_of_bleu_ += score(at::tensor(num, at::kDouble), at::tensor(den, at::kDouble), length, closest);
      ++num_sentences_;
    }
    for (std::size_t n = 1; n < num.size(); ++n) numerators[n] += num[n], denominators[n] += den[n];
    hyp += length, ref += closest;
  }
  if (average_ == Average::kMicro) {
    numerators_ += at::tensor(numerators, at::kDouble).to(device());
    denominators_ += at::tensor(denominators, at::kDouble).to(device());
    hyp_length_ += static_cast<int64_t>(hyp);
    ref_length_ += static_cast<int64_t>(ref);
  }
}

double Bleu::score(const at::Tensor& numerators, const at::Tensor& denominators, double hyp_length,
                   double ref_length) const {
  const at::Tensor num = numerators.cpu(), den = denominators.cpu();
  if (num[1].item<double>() == 0) return 0.0;  // no unigram matches: no higher ones either
  if (smooth_ == Smooth::kNoSmooth && num.slice(0, 1).min().item<double>() == 0) return 0.0;
  double penalty = 1.0;
  if (hyp_length < ref_length) penalty = hyp_length > 0 ? std::exp(1 - ref_length / hyp_length) : 0.0;
  double log_sum = 0;
  for (int64_t i = 1; i <= ngram_; ++i) {
    const double n = num[i].item<double>(), d = den[i].item<double>(), d1 = std::max(1.0, d);
    double p = 0;
    switch (smooth_) {
      case Smooth::kNoSmooth: p = n / d1; break;
      case Smooth::kSmooth1: p = n != 0 ? n / d1 : 0.1 / d1; break;
      case Smooth::kNltkSmooth2: p = i == 1 ? n / d1 : (n + 1) / (d1 + 1); break;
      case Smooth::kSmooth2: p = i == 1 ? n / d : (n + 1) / (d + 1); break;
    }
    log_sum += std::log(p) / static_cast<double>(ngram_);
  }
  return penalty * std::exp(log_sum);
}

Value Bleu::compute() {
  if (average_ == Average::kMacro) {
    const double sum = reduce(sum_of_bleu_).item<double>();
    const int64_t sentences = reduce(num_sentences_);
    if (sentences == 0) {
      throw NotComputableError(detail::rank_prefix() +
                               "kindling::metrics::Bleu must have at least one example before it can be computed");
    }
    return Value(sum / static_cast<double>(sentences));
  }
  const at::Tensor num = reduce(numerators_), den = reduce(denominators_);
  const int64_t hyp = reduce(hyp_length_), ref = reduce(ref_length_);
  return Value(score(num, den, static_cast<double>(hyp), static_cast<double>(ref)));
}

}  // namespace metrics
}  // namespace kindling
