// CharacterErrorRate (kindling/metrics/character_error_rate.h): Levenshtein distances summed
// with the references' lengths.
#include "kindling/metrics/character_error_rate.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

namespace kindling {
namespace metrics {
namespace {

// UTF-8 to code points. Hand-written: ten lines, where a library (or the deprecated
// std::codecvt_utf8) would be a dependency for one loop. Throws kindling::UsageError on bytes
// that are not UTF-8.
std::vector<int64_t> code_points(const std::string& text) {
  std::vector<int64_t> out;
  for (std::size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const int extra = lead < 0x80 ? 0 : (lead >> 5) == 0x6 ? 1 : (lead >> 4) == 0xE ? 2 : (lead >> 3) == 0x1E ? 3 : -1;
    KINDLING_CHECK(extra >= 0 && i + static_cast<std::size_t>(extra) < text.size(),
                   "kindling::metrics::CharacterErrorRate: the text is not valid UTF-8 at byte ", i, " of \"", text,
                   "\"");
    int64_t point = extra == 0 ? lead : lead & (0x3F >> extra);
    for (int k = 1; k <= extra; ++k) {
      const auto next = static_cast<unsigned char>(text[i + static_cast<std::size_t>(k)]);
      KINDLING_CHECK((next >> 6) == 0x2, "kindling::metrics::CharacterErrorRate: the text is not valid UTF-8 at byte ",
                     i + static_cast<std::size_t>(k), " of \"", text, "\"");
      point = (point << 6) | (next & 0x3F);
    }
    out.push_back(point);
    i += static_cast<std::size_t>(extra) + 1;
  }
  return out;
}

// The rows of a (N, L) integer tensor without their negative (padding) entries.
std::vector<std::vector<int64_t>> rows_of(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).cpu().contiguous();
  std::vector<std::vector<int64_t>> out(static_cast<std::size_t>(c.size(0)));
  const int64_t* data = c.data_ptr<int64_t>();
  for (int64_t i = 0; i < c.size(0); ++i) {
    for (int64_t j = 0; j < c.size(1); ++j) {
      if (data[i * c.size(1) + j] >= 0) out[static_cast<std::size_t>(i)].push_back(data[i * c.size(1) + j]);
    }
  }
  return out;
}

}  // namespace

int64_t edit_distance(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> row(b.size() + 1);  // distances from a's prefix to each prefix of b
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int64_t>(j);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    int64_t diagonal = row[0];
    row[0] = static_cast<int64_t>(i);
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const int64_t above = row[j];
      row[j] = a[i - 1] == b[j - 1] ? diagonal : std::min({row[j - 1], row[j], diagonal}) + 1;
      diagonal = above;
    }
  }
  return row.back();
}

CharacterErrorRate::CharacterErrorRate(OutputTransform output_transform, c10::Device device)
    : Metric(std::move(output_transform), device) {
  register_state("_num_errors", &errors_, Reshard::kSum);
  register_state("_num_refs", &reference_length_, Reshard::kSum);
  register_state("_num_examples", &num_updates_, Reshard::kSum);
  CharacterErrorRate::reset();
}

void CharacterErrorRate::reset() {
  errors_ = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device()));
  reference_length_ = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device()));
  num_updates_ = 0;
}

void CharacterErrorRate::add(const std::vector<std::vector<int64_t>>& predictions,
                             const std::vector<std::vector<int64_t>>& references) {
  double errors = 0, length = 0;
  for (std::size_t i = 0; i < predictions.size(); ++i) {
    errors += static_cast<double>(edit_distance(references[i], predictions[i]));
    length += static_cast<double>(references[i].size());
  }
  errors_ += errors;
  reference_length_ += length;
  ++num_updates_;
}

void CharacterErrorRate::update(const Value& output) {
  const auto [predictions, references] = y_pred_and_y(output);
  for (const at::Tensor* t : {&predictions, &references}) {
    KINDLING_CHECK(t->dim() == 2 && !at::isFloatingType(t->scalar_type()) && t->scalar_type() != at::kBool,
                   "kindling::metrics::CharacterErrorRate: predictions and references must be character codes of "
                   "shape (N, L), integer rows padded with -1, but given ",
                   predictions.scalar_type(), " ", predictions.sizes(), " and ", references.scalar_type(), " ",
                   references.sizes());
  }
  KINDLING_CHECK(predictions.size(0) == references.size(0),
                 "kindling::metrics::CharacterErrorRate: there must be as many predictions as references, but given ",
                 predictions.sizes(), " and ", references.sizes());
  add(rows_of(predictions), rows_of(references));
}

void CharacterErrorRate::update_text(const std::vector<std::string>& predictions,
                                     const std::vector<std::string>& references) {
  KINDLING_CHECK(predictions.size() == references.size(),
                 "kindling::metrics::CharacterErrorRate: predictions and references must have the same length, but "
                 "given ",
                 predictions.size(), " and ", references.size());
  std::vector<std::vector<int64_t>> p, r;
  for (std::size_t i = 0; i < predictions.size(); ++i) {
    p.push_back(code_points(predictions[i]));
    r.push_back(code_points(references[i]));
  }
  add(p, r);
}

Value CharacterErrorRate::compute() {
  const at::Tensor sums = reduce(at::stack({errors_, reference_length_})).cpu();
  const int64_t updates = reduce(num_updates_);
  if (updates == 0) {
    throw NotComputableError(detail::rank_prefix() +
                             "kindling::metrics::CharacterErrorRate must have at least one example before it can be "
                             "computed");
  }
  const double errors = sums[0].item<double>(), length = sums[1].item<double>();
  if (length == 0) return Value(errors == 0 ? 0.0 : 1.0);
  return Value(errors / length);
}

}  // namespace metrics
}  // namespace kindling
