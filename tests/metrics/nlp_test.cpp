// Bleu (kindling/metrics/bleu.h), Rouge, RougeN, RougeL (rouge.h), CharacterErrorRate and
// Perplexity, and ngrams, lcs, modified_precision (token_sequences.h): equal to the real
// ignite 0.5.5 on the same batches (tests/metrics/ignite_cases.py, where the build's Python has
// it: the LibTorch 2.15 venv; ignite gets lists of tokens and strings made from the same
// tensors), to values worked by hand, and they refuse misuse with what they were given.
// Across ranks (1, 2 and 3 with an empty shard, gloo and mpi): distributed_metrics_test.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kindling/metrics/bleu.h"
#include "kindling/metrics/character_error_rate.h"
#include "kindling/metrics/perplexity.h"
#include "kindling/metrics/rouge.h"
#include "metrics/ignite_cases.h"
#include "support/errors.h"

namespace km = kindling::metrics;
using kindling::engine::Value;
using kindling::testing::error_of;

namespace nlp_test {

using kindling::testing::batches_of;
using kindling::testing::IgniteCase;
using Batch = kindling::testing::MetricBatch;

// Rows of `width` ids below `vocabulary`, each cut to a random length of 2 or more (-1 after).
at::Tensor padded_rows(at::Generator& g, int64_t rows, int64_t width, int64_t vocabulary) {
  const at::Tensor ids = at::randint(0, vocabulary, {rows, width}, g);
  const at::Tensor lengths = at::randint(2, width + 1, {rows, 1}, g);
  return at::where(at::arange(width).unsqueeze(0) < lengths, ids, at::full_like(ids, -1));
}

std::vector<Batch> sentences() {
  // Candidates and two references each from 5 words; a third of the second references absent.
  return batches_of(51, [](at::Generator& g, int64_t n) {
    const at::Tensor candidates = padded_rows(g, n, 9, 5);
    at::Tensor references = padded_rows(g, n * 2, 10, 5).reshape({n, 2, 10});
    const at::Tensor absent = (at::rand({n, 1, 1}, g) < 0.33) & (at::arange(2).reshape({1, 2, 1}) == 1);
    return Batch{candidates, at::where(absent, at::full_like(references, -1), references)};
  });
}

std::vector<IgniteCase> cases() {
  const auto text = sentences();
  const auto characters = batches_of(52, [](at::Generator& g, int64_t n) {
    const auto letters = [&g, n] {  // 'a'..'d', padding kept
      const at::Tensor rows = padded_rows(g, n, 8, 4);
      return at::where(rows >= 0, rows + 97, rows);
    };
    const at::Tensor predictions = letters(), references = letters();
    const at::Tensor empty = at::rand({n, 1}, g) < 0.2;  // some references empty
    return Batch{predictions, at::where(empty, at::full_like(references, -1), references)};
  });
  const auto tokens = batches_of(53, [](at::Generator& g, int64_t n) {
    const at::Tensor y = at::randint(0, 5, {n, 3}, g);
    return Batch{at::randn({n, 5, 3}, g), at::where(at::rand({n, 3}, g) < 0.2, at::full_like(y, -100), y)};
  });
  using B = km::Bleu;
  using R = km::Rouge;
  std::vector<IgniteCase> out{
      {"bleu", "Bleu", "{}", text, [] { return std::make_shared<B>(); }},
      {"bleu_smooth1", "Bleu", R"({"smooth": "smooth1"})", text,
       [] { return std::make_shared<B>(4, B::Smooth::kSmooth1); }},
      {"bleu_smooth2_bigrams", "Bleu", R"({"ngram": 2, "smooth": "smooth2"})", text,
       [] { return std::make_shared<B>(2, B::Smooth::kSmooth2); }},
      {"bleu_micro", "Bleu", R"({"average": "micro"})", text,
       [] {
         return std::make_shared<B>(4, B::Smooth::kNoSmooth, nullptr, c10::Device(c10::kCPU), B::Average::kMicro);
       }},
      {"bleu_nltk2_micro", "Bleu", R"({"ngram": 3, "smooth": "nltk_smooth2", "average": "micro"})", text,
       [] {
         return std::make_shared<B>(3, B::Smooth::kNltkSmooth2, nullptr, c10::Device(c10::kCPU), B::Average::kMicro);
       }},
      {"rouge_2", "RougeN", R"({"ngram": 2})", text, [] { return std::make_shared<km::RougeN>(2); }},
      {"rouge_l_best", "RougeL", R"({"multiref": "best", "alpha": 0.5})", text,
       [] { return std::make_shared<km::RougeL>(R::MultiRef::kBest, 0.5); }},
      {"rouge", "Rouge", R"({"variants": [1, 3, "L"], "multiref": "best", "alpha": 0.2})", text,
       [] {
         return std::make_shared<R>(std::vector<int>{1, 3, R::kL}, R::MultiRef::kBest, 0.2);
       }},
      {"rouge_default", "Rouge", "{}", text, [] { return std::make_shared<R>(); }},
      {"cer", "CharacterErrorRate", "{}", characters, [] { return std::make_shared<km::CharacterErrorRate>(); }},
      {"perplexity", "Perplexity", "{}", tokens, [] { return std::make_shared<km::Perplexity>(); }},
      {"perplexity_ignore", "Perplexity", R"({"ignore_index": 2})", tokens,
       [] { return std::make_shared<km::Perplexity>(nullptr, c10::Device(c10::kCPU), 2); }},
  };
  for (auto& c : out) {
    if (c.metric == "CharacterErrorRate") c.inputs = "text";
    if (c.metric == "Bleu" || c.metric.rfind("Rouge", 0) == 0) c.inputs = "tokens";
  }
  // The case with ignore_index 2 gets targets without -100 (ignite would take -100 for a class).
  out.back().batches = batches_of(54, [](at::Generator& g, int64_t n) {
    return Batch{at::randn({n, 5}, g), at::randint(0, 5, {n}, g)};
  });
  return out;
}

TEST(NlpTest, EqualIgnite055OnTheSameBatches) { kindling::testing::expect_ignite_values(cases()); }

TEST(NlpTest, UtilitiesWorkedByHand) {
  const auto grams = km::ngrams({1, 2, 1, 2}, 2);
  EXPECT_EQ(grams.size(), 2u);
  EXPECT_EQ(grams.at({1, 2}), 2);
  EXPECT_EQ(grams.at({2, 1}), 1);
  EXPECT_TRUE(km::ngrams({1, 2}, 3).empty());
  EXPECT_EQ(km::lcs({1, 2, 3, 4}, {2, 4, 3}), 2);
  EXPECT_EQ(km::lcs({}, {1}), 0);
  // Candidate unigrams {1: 3, 2: 1}, clipped to the reference's {1: 2, 2: 1}: 3 of 4.
  EXPECT_EQ(km::modified_precision({{1, 1, 2}}, {1, 1, 1, 2}, 1), (std::pair<int64_t, int64_t>{3, 4}));
  EXPECT_EQ(km::edit_distance({1, 2, 3}, {1, 3}), 1);
}

TEST(NlpTest, ValuesWorkedByHand) {
  // A candidate equal to its reference: BLEU 1.
  km::Bleu bleu;
  bleu.update_words({{"a", "b", "c", "d", "e"}}, {{{"a", "b", "c", "d", "e"}, {"x"}}});
  EXPECT_NEAR(bleu.compute().number(), 1.0, 1e-12);
  // ignite's documented examples: the best of two references.
  const std::vector<std::string> candidate{"the", "cat", "is", "not", "there"};
  const std::vector<std::vector<std::string>> references{{"the", "cat", "is", "on", "the", "mat"},
                                                         {"there", "is", "a", "cat", "on", "the", "mat"}};
  km::RougeN rouge2(2, km::Rouge::MultiRef::kBest);
  rouge2.update_words({candidate}, {references});
  const Value r2 = rouge2.compute();
  EXPECT_NEAR(r2["Rouge-2-P"].item<double>(), 0.5, 1e-12);
  EXPECT_NEAR(r2["Rouge-2-R"].item<double>(), 0.4, 1e-12);
  EXPECT_NEAR(r2["Rouge-2-F"].item<double>(), 0.4, 1e-12);
  km::RougeL rouge_l(km::Rouge::MultiRef::kBest);
  rouge_l.update_words({candidate}, {references});
  EXPECT_NEAR(rouge_l.compute()["Rouge-L-P"].item<double>(), 0.6, 1e-12);
  // 3 edits over 7 characters; then code points, not bytes: "grüße" to "grüsse" is 2 edits of 6.
  km::CharacterErrorRate cer;
  cer.update_text({"kitten"}, {"sitting"});
  EXPECT_NEAR(cer.compute().number(), 3.0 / 7, 1e-12);
  km::CharacterErrorRate unicode;
  unicode.update_text({"gr\xc3\xbc\xc3\x9f"
                       "e"},
                      {"gr\xc3\xbcsse"});
  EXPECT_NEAR(unicode.compute().number(), 2.0 / 6, 1e-12);
  // Uniform logits over 4 classes: perplexity 4.
  km::Perplexity perplexity;
  perplexity.update(Value::tuple({at::zeros({3, 4}), at::tensor({0L, 1L, 3L})}));
  EXPECT_NEAR(perplexity.compute().number(), 4.0, 1e-9);
}

TEST(NlpTest, MisuseIsRefusedWithWhatWasGiven) {
  EXPECT_NE(error_of([] { km::Bleu bad(0); }).find("Bleu: the n-gram order must be at least 1, got 0"),
            std::string::npos);
  km::Bleu bleu;
  EXPECT_NE(error_of([&] {
              bleu.update(Value::tuple({at::ones({2, 3}), at::ones({2, 1, 3}, at::kLong)}));
            }).find("Bleu: the candidates (y_pred) must be token ids of shape (N, L)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              bleu.update(Value::tuple({at::ones({2, 3}, at::kLong), -at::ones({2, 1, 3}, at::kLong)}));
            }).find("Bleu: candidate 0 of the batch has no reference"),
            std::string::npos);
  EXPECT_NE(error_of<km::NotComputableError>([&] { bleu.compute(); }).find("Bleu must have at least one example"),
            std::string::npos);
  EXPECT_NE(error_of([] { km::RougeN bad(0); }).find("RougeN: the n-gram order must be at least 1, got 0"),
            std::string::npos);
  EXPECT_NE(
      error_of([] { km::RougeL bad(km::Rouge::MultiRef::kAverage, 1.5); }).find("alpha must be in [0, 1], got 1.5"),
      std::string::npos);
  km::CharacterErrorRate cer;
  EXPECT_NE(error_of([&] { cer.update_text({"a\xff"}, {"ab"}); }).find("is not valid UTF-8 at byte 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { cer.update_text({"a"}, {}); }).find("must have the same length, but given 1 and 0"),
            std::string::npos);
  km::Perplexity perplexity;
  EXPECT_NE(error_of([&] {
              perplexity.update(Value::tuple({at::ones({2, 4}), at::ones({2, 3}, at::kLong)}));
            }).find("exactly one more dimension than the targets y (N, ...), but given [2, 4] and [2, 3]"),
            std::string::npos);
}

}  // namespace nlp_test
