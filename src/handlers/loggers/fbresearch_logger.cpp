// FBResearchLogger: ignite's progress lines (start epoch, every N iterations, epoch, run), with
// its field formats (Python's timedelta text, utils._to_str_list of the output).
#include "kindling/handlers/loggers/fbresearch_logger.h"

#include <torch/cuda.h>
#include <torch/optim/optimizer.h>

#include <cstdio>
#include <utility>

#include "kindling/detail/torch_compat.h"
#include "kindling/error.h"
#include "kindling/handlers/profilers/timer.h"

#if KINDLING_TORCH_DEVICE_ALLOCATOR
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#endif

namespace kindling {
namespace handlers {

using engine::Engine;
using engine::Events;
using engine::Value;

struct FBResearchLogger::Impl {
  Logger logger;
  std::string delimiter;
  bool show_output = false;
  metrics::OutputTransform output_transform;
  std::vector<std::string> state_attributes;
  std::shared_ptr<Timer> iteration_timer = std::make_shared<Timer>(true);
  std::shared_ptr<Timer> data_timer = std::make_shared<Timer>(true);
};

namespace {

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

// One tensor as ignite's format_item writes it inside a container.
std::string tensor_text(const at::Tensor& t) {
  if (t.dim() == 0) return fixed(t.item<double>(), 4);
  if (t.dim() == 1) {
    std::string text = "[";
    const int64_t shown = std::min<int64_t>(t.size(0), 10);
    for (int64_t i = 0; i < shown; ++i) text += (i ? ", " : "") + fixed(t[i].item<double>(), 4);
    return text + (t.size(0) > 10 ? ", ...]" : "]");
  }
  std::string shape = "Shape[";
  for (int64_t d = 0; d < t.dim(); ++d) shape += (d ? ", " : "") + std::to_string(t.size(d));
  return shape + "]";
}

// "[epoch/max_epochs]" (snprintf: GCC 12 warns falsely, -Wstringop-overflow, on a
// "[" + std::to_string(...) chain here in C++20).
std::string epoch_text(const Engine& e) {
  char text[64];
  std::snprintf(text, sizeof(text), "[%lld/%lld]", static_cast<long long>(e.state().epoch),
                static_cast<long long>(e.state().max_epochs.value_or(0)));
  return text;
}

std::string join(const std::vector<std::string>& parts, const std::string& delimiter) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? delimiter : "") + parts[i];
  return out;
}

std::string learning_rates(torch::optim::Optimizer* optimizer) {
  if (optimizer == nullptr) return "";
  const auto& groups = optimizer->param_groups();
  const auto lr = [](const torch::optim::OptimizerParamGroup& g) {
    try {
      return fixed(g.options().get_lr(), 5);
    } catch (const std::exception&) {  // a user's optimizer whose options do not override get_lr()
      return std::string("?");
    }
  };
  if (groups.size() == 1) return "lr: " + lr(groups[0]);
  std::string text;  // ignite runs the groups together, without a delimiter
  for (std::size_t i = 0; i < groups.size(); ++i) text += "lr [g" + std::to_string(i) + "]: " + lr(groups[i]);
  return text;
}

std::string gpu_max_memory() {
#if KINDLING_TORCH_DEVICE_ALLOCATOR
  if (!torch::cuda::is_available()) return "";
  const c10::DeviceIndex device = c10::impl::getDeviceGuardImpl(c10::kCUDA)->getDevice().index();
  const auto stats = c10::getDeviceAllocator(c10::kCUDA)->getDeviceStats(device);
  const auto aggregate = static_cast<std::size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE);
  return "GPU Max Mem: " + fixed(static_cast<double>(stats.allocated_bytes[aggregate].peak) / (1024.0 * 1024.0), 0) +
         " MB";
#else
  return "";
#endif
}

std::string iteration_line(const FBResearchLogger::Impl& impl, const Engine& engine,
                           torch::optim::Optimizer* optimizer) {
  const auto& s = engine.state();
  const int64_t length = s.epoch_length.value_or(0);
  const int64_t current = length > 0 ? (s.iteration - 1) % length + 1 : s.iteration;
  const double average = impl.iteration_timer->value();
  char position[64];
  std::snprintf(position, sizeof(position), "[%lld/%lld]:", static_cast<long long>(current),
                static_cast<long long>(length));
  std::vector<std::string> fields{
      "Epoch " + epoch_text(engine), position,
      "ETA: " + FBResearchLogger::timedelta_text(average * static_cast<double>(length - current)),
      learning_rates(optimizer)};
  if (impl.show_output && !s.output.is_none()) {
    const Value output = impl.output_transform ? impl.output_transform(s.output) : s.output;
    for (auto& field : FBResearchLogger::output_fields(output)) fields.push_back(std::move(field));
  }
  std::string attributes;
  for (const std::string& name : impl.state_attributes) {
    const auto found = s.attributes.find(name);
    const std::vector<std::string> text =
        found == s.attributes.end() ? std::vector<std::string>{""} : FBResearchLogger::output_fields(found->second);
    attributes += (attributes.empty() ? "" : " ") + name + ": " + join(text, ", ");
  }
  fields.push_back(attributes);
  fields.push_back("Iter time: " + fixed(average, 4) + " s");
  fields.push_back("Data prep time: " + fixed(impl.data_timer->value(), 4) + " s");
  fields.push_back(gpu_max_memory());
  return join(fields, impl.delimiter);
}

}  // namespace

FBResearchLogger::FBResearchLogger(Logger logger, std::string delimiter, bool show_output)
    : impl_(std::make_shared<Impl>(Impl{std::move(logger), std::move(delimiter), show_output, {}, {}})) {}

std::vector<std::string> FBResearchLogger::output_fields(const Value& output) {
  if (output.is_number()) return {fixed(output.number(), 4)};
  if (output.is_tensor()) return {tensor_text(output.tensor())};
  if (output.is_named()) {
    std::vector<std::string> out;
    for (const auto& [key, t] : output.named_elements()) out.push_back(key + ": " + tensor_text(t));
    return out;
  }
  if (output.is_tuple() && output.size() > 0) {
    std::vector<std::string> parts;
    for (const at::Tensor& t : output.tuple_elements()) parts.push_back(tensor_text(t));
    return {join(parts, ", ")};
  }
  return {};
}

std::string FBResearchLogger::timedelta_text(double seconds) {
  const auto total = static_cast<int64_t>(seconds);  // int(): toward zero, as ignite's call
  const int64_t days = total >= 0 ? total / 86400 : -((-total + 86399) / 86400);
  const int64_t rest = total - days * 86400;
  char clock[32];
  std::snprintf(clock, sizeof(clock), "%lld:%02lld:%02lld", static_cast<long long>(rest / 3600),
                static_cast<long long>(rest / 60 % 60), static_cast<long long>(rest % 60));
  if (days == 0) return clock;
  return std::to_string(days) + (days == 1 || days == -1 ? " day, " : " days, ") + clock;
}

void FBResearchLogger::attach(Engine& engine, const std::string& name, int64_t every,
                              metrics::OutputTransform output_transform, std::vector<std::string> state_attributes,
                              torch::optim::Optimizer* optimizer) {
  KINDLING_CHECK(every >= 1, "kindling::handlers::FBResearchLogger::attach: every must be at least 1, got ", every,
                 "; pass the number of iterations between two lines");
  impl_->output_transform = std::move(output_transform);
  impl_->state_attributes = std::move(state_attributes);
  auto impl = impl_;
  engine.on(Events::EPOCH_STARTED,
            [impl, name](Engine& e) { impl->logger.info(name + ": start epoch " + epoch_text(e)); });
  engine.on(Events::ITERATION_COMPLETED.every(every),
            [impl, optimizer](Engine& e) { impl->logger.info(iteration_line(*impl, e, optimizer)); });
  engine.on(Events::EPOCH_COMPLETED, [impl, name](Engine& e) {
    const double took = e.state().times.at("EPOCH_COMPLETED");
    const int64_t length = e.state().epoch_length.value_or(1);
    impl->logger.info(join({name + ": " + (e.state().max_epochs.value_or(1) > 1 ? "Epoch " + epoch_text(e) : ""),
                            "Total time: " + timedelta_text(took),
                            "(" + fixed(took / static_cast<double>(length > 0 ? length : 1), 4) + " s / it)"},
                           impl->delimiter));
  });
  engine.on(Events::COMPLETED, [impl, name](Engine& e) {
    if (e.state().max_epochs.value_or(0) <= 1) return;
    impl->logger.info(join({name + ": run completed", "Total time: " + timedelta_text(e.state().times.at("COMPLETED"))},
                           impl->delimiter));
  });
  impl_->iteration_timer->reset();
  impl_->iteration_timer->attach(engine, Events::EPOCH_STARTED, Events::ITERATION_COMPLETED, Events::ITERATION_STARTED,
                                 Events::ITERATION_COMPLETED);
  impl_->data_timer->reset();
  impl_->data_timer->attach(engine, Events::EPOCH_STARTED, Events::GET_BATCH_COMPLETED, Events::GET_BATCH_STARTED,
                            Events::GET_BATCH_COMPLETED);
}

}  // namespace handlers
}  // namespace kindling
