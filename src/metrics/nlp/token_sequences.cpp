// ngrams, lcs, modified_precision and TokenMetric's reading of batches
// (kindling/metrics/token_sequences.h).
#include "kindling/metrics/token_sequences.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <unordered_map>

namespace kindling {
namespace metrics {
namespace {

// The non-negative entries of a 1-D integer tensor, in order (negative ones are padding).
TokenSequence tokens_of(const at::Tensor& row) {
  TokenSequence out;
  const at::Tensor r = row.to(at::kLong).contiguous();
  const int64_t* data = r.data_ptr<int64_t>();
  for (int64_t i = 0; i < r.numel(); ++i) {
    if (data[i] >= 0) out.push_back(data[i]);
  }
  return out;
}

bool is_integer(const at::Tensor& t) { return !at::isFloatingType(t.scalar_type()) && t.scalar_type() != at::kBool; }

}  // namespace

std::map<TokenSequence, int64_t> ngrams(const TokenSequence& sequence, int64_t n) {
  KINDLING_CHECK(n >= 1, "kindling::metrics::ngrams: the order n must be at least 1, got ", n);
  std::map<TokenSequence, int64_t> counts;
  const auto length = static_cast<int64_t>(sequence.size());
  for (int64_t i = 0; i + n <= length; ++i) ++counts[TokenSequence(sequence.begin() + i, sequence.begin() + i + n)];
  return counts;
}

int64_t lcs(const TokenSequence& a, const TokenSequence& b) {
  std::vector<int64_t> row(b.size() + 1, 0);  // one row of the dynamic programme
  for (int64_t token : a) {
    int64_t diagonal = 0;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const int64_t above = row[j];
      row[j] = token == b[j - 1] ? diagonal + 1 : std::max(row[j], row[j - 1]);
      diagonal = above;
    }
  }
  return row.back();
}

std::pair<int64_t, int64_t> modified_precision(const std::vector<TokenSequence>& references,
                                               const TokenSequence& candidate, int64_t n) {
  const auto counts = ngrams(candidate, n);
  std::map<TokenSequence, int64_t> most;  // each n-gram's largest count in one reference
  for (const auto& reference : references) {
    for (const auto& [gram, count] : ngrams(reference, n)) most[gram] = std::max(most[gram], count);
  }
  int64_t matches = 0, total = 0;
  for (const auto& [gram, count] : counts) {
    auto it = most.find(gram);
    matches += it == most.end() ? 0 : std::min(count, it->second);
    total += count;
  }
  return {matches, total};
}

void TokenMetric::update(const Value& output) {
  const auto [candidates, references] = y_pred_and_y(output);
  KINDLING_CHECK(candidates.dim() == 2 && is_integer(candidates), "kindling::metrics::", name(),
                 ": the candidates (y_pred) must be token ids of shape (N, L), an integer row per candidate padded "
                 "with -1, but given ",
                 candidates.scalar_type(), " ", candidates.sizes());
  KINDLING_CHECK(references.dim() == 3 && is_integer(references), "kindling::metrics::", name(),
                 ": the references (y) must be token ids of shape (N, R, L), R rows per candidate padded with -1, "
                 "but given ",
                 references.scalar_type(), " ", references.sizes());
  KINDLING_CHECK(candidates.size(0) == references.size(0), "kindling::metrics::", name(),
                 ": there must be as many candidates as reference sets, but given ", candidates.sizes(), " and ",
                 references.sizes());
  TokenBatch batch;
  const at::Tensor c = candidates.cpu(), r = references.cpu();
  for (int64_t i = 0; i < c.size(0); ++i) {
    batch.candidates.push_back(tokens_of(c[i]));
    std::vector<TokenSequence> refs;
    for (int64_t k = 0; k < r.size(1); ++k) {
      TokenSequence ref = tokens_of(r[i][k]);
      if (!ref.empty()) refs.push_back(std::move(ref));
    }
    batch.references.push_back(std::move(refs));
  }
  add(batch);
}

void TokenMetric::update_words(const std::vector<std::vector<std::string>>& candidates,
                               const std::vector<std::vector<std::vector<std::string>>>& references) {
  KINDLING_CHECK(candidates.size() == references.size(), "kindling::metrics::", name(),
                 ": there must be as many candidates as reference lists, but given ", candidates.size(), " and ",
                 references.size());
  std::unordered_map<std::string, int64_t> ids;  // words compare by identity only: ids of this call
  const auto encode = [&ids](const std::vector<std::string>& words) {
    TokenSequence out;
    for (const auto& w : words) out.push_back(ids.emplace(w, static_cast<int64_t>(ids.size())).first->second);
    return out;
  };
  TokenBatch batch;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    batch.candidates.push_back(encode(candidates[i]));
    std::vector<TokenSequence> refs;
    for (const auto& ref : references[i]) refs.push_back(encode(ref));
    batch.references.push_back(std::move(refs));
  }
  add(batch);
}

}  // namespace metrics
}  // namespace kindling
