// Rouge, RougeN and RougeL (kindling/metrics/rouge.h): per candidate, the precision, recall and
// F-measure of its n-gram (or longest common subsequence) matches with its references.
#include "kindling/metrics/rouge.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <utility>

namespace kindling {
namespace metrics {
namespace {

// Matches and the lengths they are counted against (ignite's Score).
struct Overlap {
  double match = 0, candidate = 0, reference = 0;
  double precision() const { return candidate > 0 ? match / candidate : 0; }
  double recall() const { return reference > 0 ? match / reference : 0; }
};

double total_of(const std::map<TokenSequence, int64_t>& counts) {
  double total = 0;
  for (const auto& kv : counts) total += static_cast<double>(kv.second);
  return total;
}

Overlap overlap(int variant, const TokenSequence& candidate, const TokenSequence& reference) {
  if (variant == Rouge::kL) {
    return {static_cast<double>(lcs(candidate, reference)), static_cast<double>(candidate.size()),
            static_cast<double>(reference.size())};
  }
  const auto c = ngrams(candidate, variant), r = ngrams(reference, variant);
  double match = 0;
  for (const auto& [gram, count] : c) {
    auto it = r.find(gram);
    if (it != r.end()) match += static_cast<double>(std::min(count, it->second));
  }
  return {match, total_of(c), total_of(r)};
}

std::string variant_name(int variant) {
  return "Rouge-" + (variant == Rouge::kL ? std::string("L") : std::to_string(variant));
}

int checked_order(int ngram) {
  KINDLING_CHECK(ngram >= 1, "kindling::metrics::RougeN: the n-gram order must be at least 1, got ", ngram);
  return ngram;
}

}  // namespace

Rouge::Rouge(std::vector<int> variants, MultiRef multiref, double alpha, OutputTransform output_transform,
             c10::Device device)
    : TokenMetric(std::move(output_transform), device),
      variants_(variants.empty() ? std::vector<int>{1, 2, 4, kL} : std::move(variants)),
      multiref_(multiref),
      alpha_(alpha) {
  for (int v : variants_) {
    KINDLING_CHECK(v >= 0,
                   "kindling::metrics::Rouge: a variant must be an n-gram order of at least 1 or Rouge::kL, "
                   "got ",
                   v);
  }
  KINDLING_CHECK(alpha >= 0 && alpha <= 1, "kindling::metrics::Rouge: alpha must be in [0, 1], got ", alpha);
  register_state("_precision", &precision_, Reshard::kSum);
  register_state("_recall", &recall_, Reshard::kSum);
  register_state("_fmeasure", &fmeasure_, Reshard::kSum);
  register_state("_num_examples", &num_examples_, Reshard::kSum);
  Rouge::reset();
}

void Rouge::reset() {
  const auto options = at::TensorOptions().dtype(at::kDouble).device(device());
  const auto v = static_cast<int64_t>(variants_.size());
  precision_ = at::zeros({v}, options);
  recall_ = at::zeros({v}, options);
  fmeasure_ = at::zeros({v}, options);
  num_examples_ = 0;
}

void Rouge::add(const TokenBatch& batch) {
  for (std::size_t i = 0; i < batch.candidates.size(); ++i) {
    KINDLING_CHECK(!batch.references[i].empty(), "kindling::metrics::", name(), ": candidate ", i,
                   " of the batch has no reference (a reference row of padding only is none)");
  }
  const std::size_t v = variants_.size();
  std::vector<double> p(v, 0.0), r(v, 0.0), f(v, 0.0);
  for (std::size_t i = 0; i < batch.candidates.size(); ++i) {
    for (std::size_t k = 0; k < v; ++k) {
      Overlap score;
      bool first = true;
      for (const auto& reference : batch.references[i]) {
        const Overlap o = overlap(variants_[k], batch.candidates[i], reference);
        if (multiref_ == MultiRef::kAverage) {
          score.match += o.match, score.candidate += o.candidate, score.reference += o.reference;
        } else if (first || o.recall() > score.recall()) {
          score = o;
        }
        first = false;
      }
      const double precision = score.precision(), recall = score.recall();
      p[k] += precision;
      r[k] += recall;
      if (precision * recall > 0) f[k] += precision * recall / ((1 - alpha_) * precision + alpha_ * recall);
    }
  }
  precision_ += at::tensor(p, at::kDouble).to(device());
  recall_ += at::tensor(r, at::kDouble).to(device());
  fmeasure_ += at::tensor(f, at::kDouble).to(device());
  num_examples_ += static_cast<int64_t>(batch.candidates.size());
}

Value Rouge::compute() {
  const at::Tensor sums = reduce(at::stack({precision_, recall_, fmeasure_})).cpu();
  const int64_t n = reduce(num_examples_);
  if (n == 0) {
    throw NotComputableError(detail::rank_prefix() + "kindling::metrics::" + name() +
                             " must have at least one example before it can be computed");
  }
  std::map<std::string, at::Tensor> out;
  for (std::size_t k = 0; k < variants_.size(); ++k) {
    const std::string key = variant_name(variants_[k]);
    const auto column = static_cast<int64_t>(k);
    out[key + "-P"] = sums[0][column] / static_cast<double>(n);
    out[key + "-R"] = sums[1][column] / static_cast<double>(n);
    out[key + "-F"] = sums[2][column] / static_cast<double>(n);
  }
  return Value::named(out);
}

RougeN::RougeN(int ngram, MultiRef multiref, double alpha, OutputTransform output_transform, c10::Device device)
    : Rouge({checked_order(ngram)}, multiref, alpha, std::move(output_transform), device) {}

RougeL::RougeL(MultiRef multiref, double alpha, OutputTransform output_transform, c10::Device device)
    : Rouge({kL}, multiref, alpha, std::move(output_transform), device) {}

}  // namespace metrics
}  // namespace kindling
