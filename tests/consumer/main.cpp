// Built against an installed kindling with nothing but the umbrella header: checks that the
// package links and works (serial model), and that every auto_* helper is reachable from
// <kindling/kindling.h> alone.
#include <kindling/kindling.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <iostream>
#include <memory>

namespace {

class Squares : public kindling::data::Dataset {
 public:
  int64_t size() const override { return 10; }
  kindling::data::Example get(int64_t i) const override {
    return {at::full({1}, static_cast<float>(i)), at::full({}, i * i, at::kLong)};
  }
  std::string name() const override { return "Squares"; }
};

}  // namespace

int main() {
  kindling::set_log_level(kindling::LogLevel::kWarning);  // no option dump from auto_dataloader
  const auto backends = kindling::dist::available_backends();
  const int sum = kindling::dist::all_reduce(41) + 1;
  auto model = kindling::dist::auto_model(torch::nn::Linear(1, 1));
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto& same = kindling::dist::auto_optim(opt);
  auto loader =
      kindling::dist::auto_dataloader(std::make_shared<Squares>(), kindling::data::DataLoaderOptions().batch_size(4));
  int64_t batches = 0, samples = 0;
  for (const auto& batch : loader) {
    ++batches;
    samples += batch.data.size(0);
  }
  if (backends.empty() || backends.front() != "serial" || sum != 42 || kindling::dist::get_world_size() != 1 ||
      &same != &opt || model.reducer() != nullptr || batches != 3 || samples != 10) {
    std::cerr << "consumer: unexpected result\n";
    return 1;
  }
  std::cout << "consumer: kindling " << KINDLING_VERSION_STRING << " OK, backends:";
  for (const auto& b : backends) std::cout << ' ' << b;
  std::cout << "\n";
  return 0;
}
