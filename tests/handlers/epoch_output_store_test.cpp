// EpochOutputStore (kindling/handlers/epoch_output_store.h) on a real Engine: the outputs of
// each epoch only, transformed, stored in the state under a name; misuse refused.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/handlers/epoch_output_store.h"
#include "support/errors.h"

namespace kh = kindling::handlers;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;
using kindling::testing::error_of;

namespace epoch_output_store_test {

TEST(EpochOutputStoreTest, KeepsEachEpochsOutputsAndStoresThem) {
  Engine evaluator([](Engine& e, const int& b) { return Value(static_cast<double>(b + 10 * e.state().epoch)); });
  auto store = std::make_shared<kh::EpochOutputStore>([](const Value& v) { return Value(v.number() * 2); });
  store->attach(evaluator, "outputs");
  std::vector<std::vector<double>> seen;
  evaluator.on(Events::EPOCH_COMPLETED, [&](Engine& e) {
    std::vector<double> epoch;
    for (const at::Tensor& t : e.state().attributes.at("outputs").tuple_elements()) epoch.push_back(t.item<double>());
    seen.push_back(epoch);
    EXPECT_EQ(store->data().size(), 3u);
  });
  std::vector<int> data{1, 2, 3};
  evaluator.run(data, 2);
  EXPECT_EQ(seen, (std::vector<std::vector<double>>{{22, 24, 26}, {42, 44, 46}}));
}

TEST(EpochOutputStoreTest, MisuseIsRefusedWithWhatWasGiven) {
  Engine evaluator([](Engine&, const int& b) { return Value::tuple({at::ones({1}) * b, at::zeros({1})}); });
  auto store = std::make_shared<kh::EpochOutputStore>();
  store->attach(evaluator, "pairs");
  std::vector<int> data{1, 2};
  EXPECT_NE(
      error_of([&] { evaluator.run(data, 1); }).find("EpochOutputStore: the output of iteration 1 of the epoch is"),
      std::string::npos);
  EXPECT_EQ(store->data().size(), 2u);  // data() keeps any output
  kh::EpochOutputStore on_the_stack;
  EXPECT_NE(error_of([&] { on_the_stack.attach(evaluator); }).find("std::shared_ptr"), std::string::npos);
}

}  // namespace epoch_output_store_test
