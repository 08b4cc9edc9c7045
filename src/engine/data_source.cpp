// The DataLoader as an Engine's data: passes are the loader's epochs, and a pass starts at
// any batch without loading the ones before it (DataLoader::begin_at).
#include "kindling/engine/detail/data_source.h"

#include "kindling/data/sampler.h"

namespace kindling {
namespace engine {
namespace detail {
namespace {

class LoaderSource : public DataSource {
 public:
  explicit LoaderSource(data::DataLoader* loader) : loader_(loader) {}
  explicit LoaderSource(std::shared_ptr<data::DataLoader> owned) : owned_(std::move(owned)), loader_(owned_.get()) {}

  std::optional<int64_t> size() override { return loader_->size(); }
  // Both distributed samplers give rank r the positions r, r + replicas, ... of one global
  // order, so batch k over all ranks is the global order's block [k B, (k + 1) B).
  std::optional<Sharding> sharding() override {
    const int64_t batch = loader_->options().batch_size();
    const data::Sampler* sampler = loader_->sampler().get();
    int64_t replicas = 1;
    if (const auto* d = dynamic_cast<const data::DistributedSampler*>(sampler)) replicas = d->num_replicas();
    if (const auto* d = dynamic_cast<const data::DistributedProxySampler*>(sampler)) replicas = d->num_replicas();
    return Sharding{replicas, batch * replicas};
  }
  void start(int64_t pass, int64_t offset) override {
    it_ = data::DataLoader::Iterator();  // stops the previous pass's workers first
    loader_->set_epoch(pass);
    it_ = loader_->begin_at(offset);
    first_ = true;
  }
  bool next(std::any& out) override {
    if (!first_ && it_ != loader_->end()) ++it_;
    first_ = false;
    if (it_ == loader_->end()) return false;
    out = *it_;
    return true;
  }

 private:
  std::shared_ptr<data::DataLoader> owned_;
  data::DataLoader* loader_;
  data::DataLoader::Iterator it_;
  bool first_ = true;
};

}  // namespace

std::shared_ptr<DataSource> make_data_source(data::DataLoader& loader) {
  return std::make_shared<LoaderSource>(&loader);
}

std::shared_ptr<DataSource> make_data_source(data::DataLoader&& loader) {
  return std::make_shared<LoaderSource>(std::make_shared<data::DataLoader>(std::move(loader)));
}

}  // namespace detail
}  // namespace engine
}  // namespace kindling
