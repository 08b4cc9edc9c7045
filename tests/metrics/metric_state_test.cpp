// Metric::state_dict / load_state_dict: a training run stopped mid-epoch and resumed from
// saved state (engine + every metric, through pickled bytes as a checkpoint holds them)
// computes exactly the uninterrupted run's epoch values, on 1 process and on 2 real ranks;
// the saved list holds one entry per rank (ignite's layout); mismatched states are refused
// without change.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/serialize.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/engine/engine.h"
#include "kindling/handlers/checkpointing/checkpoint.h"
#include "kindling/handlers/checkpointing/stateful.h"
#include "kindling/metrics/metrics.h"
#include "support/errors.h"
#include "support/metrics.h"
#include "support/multiprocess.h"

namespace kd = kindling::dist;
namespace kh = kindling::handlers;
namespace km = kindling::metrics;
using kindling::StateDict;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;
using kindling::testing::error_of;
using kindling::testing::join_rank_states;
using kindling::testing::LaunchOptions;
using kindling::testing::pick;
using kindling::testing::run_workers;

namespace {

constexpr int64_t kBatches = 7;
constexpr int64_t kStateClasses = 3;

// Batch b of `rank`: logits, labels and a regression pair, drawn from a fixed seed.
Value batch(int rank, int64_t b) {
  at::Generator gen = at::detail::createCPUGenerator(static_cast<uint64_t>(100 * rank + b + 1));
  const int64_t n = 3 + b % 3;
  const at::Tensor logits = at::randn({n, kStateClasses}, gen), y = at::randint(kStateClasses, {n}, gen);
  const at::Tensor reg = at::randn({n}, gen).to(at::kDouble), reg_y = at::randn({n}, gen).to(at::kDouble);
  // n images of 2 boxes of 2 classes and 3 detections: the boxes jittered, and one anywhere
  const at::Tensor corner = at::rand({n, 3, 2}, gen) * 50, boxes = at::cat({corner, corner + 5 + corner}, 2);
  const at::Tensor labels = at::randint(0, 2, {n, 3, 1}, gen).to(at::kFloat);
  const at::Tensor det_y = at::cat({boxes.slice(1, 0, 2), labels.slice(1, 0, 2)}, 2);
  const at::Tensor det_pred =
      at::cat({boxes * (1 + 0.2 * at::rand({n, 3, 4}, gen)), at::rand({n, 3, 1}, gen), labels}, 2);
  return Value::named(
      {{"logits", logits}, {"y", y}, {"reg", reg}, {"reg_y", reg_y}, {"det_pred", det_pred}, {"det_y", det_y}});
}

using Named = std::vector<std::pair<std::string, std::shared_ptr<km::Metric>>>;

// One metric of each kind of accumulator (counts, float sums, lazily shaped tensors, lists
// of tensors, an inferred input type), and a running average of the output.
Named make_metrics() {
  using PR = km::PrecisionRecallBase;
  return {
      {"accuracy", std::make_shared<km::Accuracy>(pick("logits", "y"))},
      {"loss",
       std::make_shared<km::Loss>([](const at::Tensor& p, const at::Tensor& y) { return at::cross_entropy_loss(p, y); },
                                  pick("logits", "y"))},
      {"precision", std::make_shared<km::Precision>(pick("logits", "y"), PR::Average::kMacro)},
      {"recall", std::make_shared<km::Recall>(pick("logits", "y"), PR::Average::kNone)},
      {"top2", std::make_shared<km::TopKCategoricalAccuracy>(2, pick("logits", "y"))},
      {"confusion", std::make_shared<km::ConfusionMatrix>(kStateClasses, std::nullopt, pick("logits", "y"))},
      {"mse", std::make_shared<km::MeanSquaredError>(pick("reg", "reg_y"))},
      {"r2", std::make_shared<km::R2Score>(pick("reg", "reg_y"))},
      {"pearson", std::make_shared<km::PearsonCorrelation>(1e-8, pick("reg", "reg_y"))},
      {"max_abs", std::make_shared<km::MaximumAbsoluteError>(pick("reg", "reg_y"))},
      {"median_abs", std::make_shared<km::MedianAbsoluteError>(pick("reg", "reg_y"))},
      {"kendall",
       std::make_shared<km::KendallRankCorrelation>(km::KendallRankCorrelation::Variant::kB, pick("reg", "reg_y"))},
      {"average", std::make_shared<km::Average>([](const Value& o) { return Value(o["reg"].mean()); })},
      {"epoch", std::make_shared<km::EpochMetric>(
                    [](const at::Tensor& p, const at::Tensor& y) {
                      return Value((at::argmax(p, 1) == y).to(at::kDouble).mean().item<double>());
                    },
                    pick("logits", "y"))},
      {"detection", std::make_shared<km::ObjectDetectionAvgPrecisionRecall>(
                        std::nullopt, std::nullopt, 2, 100, km::ObjectDetectionAvgPrecisionRecall::AreaRange::kAll,
                        pick("det_pred", "det_y"))},
      {"running", km::RunningAverage::of_output([](const Value& o) { return Value(o["reg"].sum()); }, 0.8)},
  };
}

std::string text(const Value& v) {
  std::ostringstream out;
  if (v.is_number()) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%.17g", v.number());
    out << buf;
  } else {  // a tensor, or a tuple's (ObjectDetectionAvgPrecisionRecall's) one after the other
    at::Tensor t =
        (v.is_tuple() ? at::cat({v[0].reshape(-1), v[1].reshape(-1)}) : v.tensor()).to(at::kDouble).reshape(-1);
    for (int64_t i = 0; i < t.numel(); ++i) {
      char buf[40];
      std::snprintf(buf, sizeof(buf), "%.17g", t[i].item<double>());
      out << (i ? "," : "") << buf;
    }
  }
  return out.str();
}

std::vector<char> as_bytes(const StateDict& sd) { return torch::pickle_save(sd); }
StateDict from_bytes(const std::vector<char>& bytes) { return torch::pickle_load(bytes).toGenericDict(); }

// Trains over 2 epochs of this rank's batches with every metric attached. With stop_at, it
// saves (engine + metrics, pickled) after that iteration, ends, and a second engine with new
// metrics loads the save and finishes the run. Returns "<epoch>:<name>" -> value text of
// every epoch completed by the engine that finished it, and (with stop_at) the saved metric
// state of rank `rank` as the number of ranks it lists ("saved:name:ranks").
std::map<std::string, std::string> train(int rank, std::optional<int64_t> stop_at) {
  std::vector<Value> data;
  for (int64_t b = 0; b < kBatches; ++b) data.push_back(batch(rank, b));
  std::map<std::string, std::string> out;
  auto record = [&out](Engine& e) {
    for (const auto& [name, value] : e.state().metrics) {
      out[std::to_string(e.state().epoch) + ":" + name] = text(value);
    }
  };
  auto attach = [](Engine& e, const Named& metrics) {
    for (const auto& [name, m] : metrics) {
      m->attach(e, name, name == "running" ? km::Usage::kRunningBatchWise : km::Usage::kEpochWise);
    }
  };
  auto step = [](Engine&, const Value& b) { return b; };

  Engine first(step);
  Named metrics = make_metrics();
  attach(first, metrics);
  first.on(Events::EPOCH_COMPLETED, record);
  std::vector<char> engine_bytes;
  std::map<std::string, std::vector<char>> saved;
  if (stop_at) {
    first.on(Events::ITERATION_COMPLETED, [&](Engine& e) {
      if (e.state().iteration != *stop_at) return;
      engine_bytes = as_bytes(e.state_dict());
      for (const auto& [name, m] : metrics) saved[name] = as_bytes(m->state_dict());  // a collective
      e.terminate();
    });
  }
  first.run(data, 2);
  if (!stop_at) return out;

  out.clear();  // only the resumed engine's epochs count from here
  Engine second(step);
  Named fresh = make_metrics();
  attach(second, fresh);
  second.on(Events::EPOCH_COMPLETED, record);
  second.load_state_dict(from_bytes(engine_bytes));
  for (const auto& [name, m] : fresh) {
    const StateDict state = from_bytes(saved.at(name));
    m->load_state_dict(state);
    // ignite's layout: {"__metric_state_per_rank": [one dict per rank]}
    const bool ignites = state.size() == 1 && state.contains("__metric_state_per_rank");
    out["saved:" + name + ":ranks"] =
        ignites ? std::to_string(state.at("__metric_state_per_rank").toList().size()) : "not-ignites-layout";
  }
  second.run(data);
  return out;
}

void print(const std::map<std::string, std::string>& values) {
  for (const auto& [key, value] : values) std::printf("VALUE %s %s\n", key.c_str(), value.c_str());
  std::fflush(stdout);
}

// The resumed run's values of the epochs it completed equal the uninterrupted run's.
void expect_same_epochs(const std::map<std::string, std::string>& resumed,
                        const std::map<std::string, std::string>& whole, const std::string& where) {
  int compared = 0;
  for (const auto& [key, value] : resumed) {
    if (key.rfind("saved:", 0) == 0) continue;
    ASSERT_TRUE(whole.count(key)) << where << ": " << key;
    EXPECT_EQ(value, whole.at(key)) << where << ": " << key;
    ++compared;
  }
  EXPECT_GE(compared, 10) << where;
}

}  // namespace

TEST(MetricStateTest, ResumedMidEpochTheEpochValuesAreTheUninterruptedOnes) {
  const auto whole = train(0, std::nullopt);
  ASSERT_EQ(whole.size(), 2 * make_metrics().size());  // every metric, 2 epochs
  for (int64_t stop : {3, 7, 10}) {                    // mid first epoch, its end, mid second epoch
    const auto resumed = train(0, stop);
    expect_same_epochs(resumed, whole, "stopped at iteration " + std::to_string(stop));
    EXPECT_EQ(resumed.at("saved:accuracy:ranks"), "1");  // one rank
  }
}

KINDLING_WORKER(metric_state_resume) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  print(train(kd::get_rank(), std::nullopt));
  std::printf("RESUMED\n");
  print(train(kd::get_rank(), 5));

  // Through a Checkpoint: called on every rank (the metric's state_dict gathers), written by
  // rank 0, loaded by each rank from the one file.
  const int rank = kd::get_rank();
  auto acc = std::make_shared<km::Accuracy>(pick("logits", "y"));
  for (int64_t b = 0; b <= 2 * rank; ++b) acc->update(pick("logits", "y")(batch(rank, b)));  // unequal counts
  Engine holder([](Engine&, const Value& b) { return b; });
  auto checkpoint =
      std::make_shared<kh::Checkpoint>(kh::Objects{{"accuracy", kh::stateful(acc)}}, std::getenv("KINDLING_TEST_DIR"));
  checkpoint->attach(holder, Events::COMPLETED);
  std::vector<Value> one{batch(rank, 0)};
  holder.run(one);
  kd::barrier();
  auto loaded = std::make_shared<km::Accuracy>(pick("logits", "y"));
  kh::Checkpoint::load_objects({{"accuracy", kh::stateful(loaded)}}, checkpoint->last_checkpoint().value());
  WCHECK(text(loaded->compute()) == text(acc->compute()), << "rank " << rank);
  std::printf("CHECKPOINT %s\n", text(loaded->compute()).c_str());
  kd::finalize();
}

TEST(MetricStateTest, EveryRankSavesItsOwnAccumulatorsAndResumesExactly) {
  char dir[] = "/tmp/kindling-metric-state-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  LaunchOptions opts;
  opts.world_size = 2;
  opts.env["KINDLING_TEST_DIR"] = dir;
  auto results = run_workers("metric_state_resume", opts);
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << kindling::testing::describe(results);
    const auto split = r.out.find("RESUMED");
    ASSERT_NE(split, std::string::npos) << r.out;
    const auto whole = kindling::testing::tagged_lines(r.out.substr(0, split), "VALUE"),
               resumed = kindling::testing::tagged_lines(r.out.substr(split), "VALUE");
    ASSERT_EQ(whole.size(), 2 * make_metrics().size()) << r.out;  // every metric, 2 epochs
    expect_same_epochs(resumed, whole, "rank " + std::to_string(r.rank));
    EXPECT_EQ(resumed.at("saved:accuracy:ranks"), "2") << "a list entry per rank";
    EXPECT_EQ(resumed.at("saved:epoch:ranks"), "2");
    EXPECT_NE(r.out.find("CHECKPOINT "), std::string::npos) << r.out;
  }
  std::filesystem::remove_all(dir);
}

namespace {

// The layout kindling wrote before ignite's, {key: [rank 0's value]}, of a one-rank state.
StateDict by_key(const StateDict& ignites) {
  StateDict lists = kindling::new_state_dict();
  for (const auto& entry : ignites.at("__metric_state_per_rank").toList().get(0).toGenericDict()) {
    c10::impl::GenericList list(c10::AnyType::get());
    list.push_back(entry.value());
    lists.insert(entry.key(), list);
  }
  return lists;
}

}  // namespace

TEST(MetricStateTest, MismatchedStatesAreRefusedAndChangeNothing) {
  km::Accuracy acc(pick("logits", "y"));
  acc.update(pick("logits", "y")(batch(0, 0)));
  const std::string before = text(acc.compute());
  const StateDict good = acc.state_dict();

  // ignite's layout
  StateDict wrong_rank = kindling::new_state_dict();
  auto ranks = good.at("__metric_state_per_rank").toList().copy();
  auto rank0 = ranks.get(0).toGenericDict().copy();
  rank0.insert_or_assign("_num_examples", std::string("seven"));
  ranks.set(0, rank0);
  wrong_rank.insert("__metric_state_per_rank", ranks);
  EXPECT_NE(error_of([&] { acc.load_state_dict(wrong_rank); }).find("'_num_examples' of rank 0 should be an integer"),
            std::string::npos);
  ASSERT_EQ(rank0.erase("_num_correct"), 1u);
  ranks.set(0, rank0);
  EXPECT_NE(error_of([&] {
              acc.load_state_dict(wrong_rank);
            }).find("Accuracy::load_state_dict: the state of saved rank 0 has no key '_num_correct'"),
            std::string::npos);

  // The layout kindling wrote before
  const StateDict old = by_key(good);
  StateDict two_ranks = old.copy();
  auto list = two_ranks.at("_num_examples").toList().copy();
  list.push_back(list.get(0));
  two_ranks.insert_or_assign("_num_examples", list);
  EXPECT_NE(error_of([&] { acc.load_state_dict(two_ranks); })
                .find("holds the state of 1 rank(s) but '_num_examples' of 2; the lists of one metric's state_dict() "
                      "have one length"),
            std::string::npos);

  StateDict missing = old.copy();
  ASSERT_EQ(missing.erase("_num_correct"), 1u);
  EXPECT_NE(error_of([&] { acc.load_state_dict(missing); })
                .find("Accuracy::load_state_dict: the state has no key "
                      "'_num_correct'"),
            std::string::npos);

  StateDict wrong = old.copy();
  c10::impl::GenericList text_list(c10::AnyType::get());
  text_list.push_back(c10::IValue(std::string("seven")));
  wrong.insert_or_assign("_num_examples", text_list);
  EXPECT_NE(error_of([&] { acc.load_state_dict(wrong); }).find("'_num_examples' of rank 0 should be an integer"),
            std::string::npos);

  // Another metric's state: the keys do not match.
  km::MeanSquaredError mse;
  EXPECT_NE(error_of([&] { mse.load_state_dict(good); }).find("has no key '_sum'"), std::string::npos);

  EXPECT_EQ(text(acc.compute()), before);  // nothing changed
  acc.load_state_dict(old);                // the layout kindling wrote before loads
  EXPECT_EQ(text(acc.compute()), before);
}

namespace {

// Values of a metric's compute() as numbers.
std::vector<double> numbers(const Value& v) {
  std::vector<double> out;
  std::istringstream in(text(v));
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stod(item));
  return out;
}

// A metric whose accumulator has no reshard rule (the default, as a user's metric would).
class Counter : public km::Metric {
 public:
  Counter() : km::Metric(nullptr) { register_state("_count", &count_); }
  void reset() override { count_ = 0; }
  void update(const Value&) override { ++count_; }
  Value compute() override { return Value(static_cast<double>(reduce(count_))); }
  std::string name() const override { return "Counter"; }

 private:
  int64_t count_ = 0;
};

}  // namespace

TEST(MetricStateTest, SavedAtThreeRanksResumesAtOneOverTheUnion) {
  // Saved "rank" r had seen kSeen[r] batches of its shard (rank 1 none: empty accumulators);
  // one process loads the 3-rank state, sees one more batch, and computes what a metric that
  // saw every one of those batches computes.
  const int64_t kSeen[] = {2, 0, 3};
  const Named whole = make_metrics();
  std::vector<Named> saved{make_metrics(), make_metrics(), make_metrics()};
  for (int r = 0; r < 3; ++r) {
    for (int64_t b = 0; b < kSeen[r]; ++b) {
      for (size_t i = 0; i < whole.size(); ++i) {
        const Value out = whole[i].second->output_transform()(batch(r, b));
        whole[i].second->update(out);
        saved[static_cast<size_t>(r)][i].second->update(out);
      }
    }
  }
  const Named resumed = make_metrics();
  int compared = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    const std::string& name = whole[i].first;
    if (name == "running") continue;  // per-rank values of a one-process simulation differ; see below
    const StateDict three = join_rank_states({saved[0][i].second, saved[1][i].second, saved[2][i].second});
    resumed[i].second->load_state_dict(three);
    for (const auto* m : {&resumed, &whole}) (*m)[i].second->update((*m)[i].second->output_transform()(batch(9, 0)));
    const auto got = numbers(resumed[i].second->compute()), want = numbers(whole[i].second->compute());
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_NEAR(got[k], want[k], 1e-12 * std::max(1.0, std::abs(want[k]))) << name << "[" << k << "]";
      ++compared;
    }
  }
  EXPECT_GE(compared, 10);
}

TEST(MetricStateTest, StatesThatCannotBeReshardedAreRefusedWithTheReason) {
  // Replicated values that differ between saved ranks: not a consistent distributed run.
  std::vector<std::shared_ptr<km::Metric>> running;
  for (int r = 0; r < 2; ++r) {
    auto m = km::RunningAverage::of_output([](const Value& o) { return Value(o["reg"].sum()); }, 0.8);
    m->update(m->output_transform()(batch(r, 0)));
    running.push_back(m);
  }
  auto fresh = km::RunningAverage::of_output([](const Value& o) { return Value(o["reg"].sum()); }, 0.8);
  EXPECT_NE(error_of([&] { fresh->load_state_dict(join_rank_states(running)); })
                .find("'_value' should be the same on every rank, but saved rank 0 and saved rank 1 hold different "
                      "values"),
            std::string::npos);
  // Equal replicated values (as every rank of a real run holds) resume.
  fresh->load_state_dict(join_rank_states({running[0], running[0]}));
  EXPECT_EQ(text(fresh->compute()), text(running[0]->compute()));

  // An accumulator registered without a rule resumes only at its world size.
  auto a = std::make_shared<Counter>(), b = std::make_shared<Counter>();
  a->update(Value(1.0));
  Counter c;
  const std::string error = error_of([&] { c.load_state_dict(join_rank_states({a, b})); });
  EXPECT_NE(error.find("Counter::load_state_dict: '_count' holds the state of 2 rank(s) but this run has 1; this "
                       "accumulator has no rule to reshard it"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("Resume at 2 ranks"), std::string::npos) << error;
  EXPECT_EQ(c.compute().number(), 0.0);  // nothing changed
}
