// Datasets and loaders of the cifar10 example.
#include "dataflow.h"

#include <kindling/data/datasets.h>
#include <kindling/data/transforms.h>
#include <kindling/dist/auto.h>
#include <kindling/dist/dist.h>
#include <kindling/error.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

namespace cifar10 {

namespace data = kindling::data;
namespace tf = kindling::data::transforms;
namespace fs = std::filesystem;

namespace {

// Whether `dir` holds `name`; a path that cannot be examined (a loop of links, a folder
// without search permission) throws UsageError naming it and the system's reason.
bool holds(const fs::path& dir, const std::string& name) {
  return path_status("--data_path's file", (dir / name).string()).type() != fs::file_type::not_found;
}

bool has_idx(const fs::path& dir) {
  return holds(dir, "train-images-idx3-ubyte.gz") || holds(dir, "train-images-idx3-ubyte");
}

// Refuses a --data_path folder that this process may not read or search, naming the user.
void check_readable(const std::string& path) {
  const bool readable = ::access(path.c_str(), R_OK | X_OK) == 0;
  const int error = errno;
  KINDLING_CHECK(readable, "cifar10: --data_path '", path, "' cannot be read (", std::strerror(error),
                 "): the user running cifar10 (uid ", ::getuid(), ") needs read and search permission on the folder; ",
                 "grant it (chmod a+rx '", path, "') or copy the data to a folder this user can read");
}

std::shared_ptr<const data::Dataset> first(std::shared_ptr<const data::Dataset> ds, int64_t n) {
  if (n <= 0 || n >= ds->size()) return ds;
  std::vector<int64_t> indices(static_cast<std::size_t>(n));
  std::iota(indices.begin(), indices.end(), int64_t{0});
  return std::make_shared<data::Subset>(std::move(ds), std::move(indices));
}

}  // namespace

DataChoice choose_data(const Config& config) {
  if (config.data_path.empty()) {
    return {"fashion-mnist", data::kFashionMnistRoot,
            std::string("no --data_path given: the embedded default, Debian's Fashion-MNIST in ") +
                data::kFashionMnistRoot,
            1};
  }
  const fs::path root(config.data_path);
  KINDLING_CHECK(fs::is_directory(path_status("--data_path", config.data_path)), "cifar10: --data_path '", config.data_path,
                 "' is not a folder; give the folder of CIFAR-10's binary version (data_batch_1.bin ... "
                 "test_batch.bin) or of Fashion-MNIST's idx files, or leave --data_path out for Debian's Fashion-MNIST");
  check_readable(config.data_path);
  for (const fs::path& dir : {root, root / "cifar-10-batches-bin"}) {
    if (holds(dir, "data_batch_1.bin")) {
      return {"cifar10", dir.string(), "--data_path holds CIFAR-10 (binary version) in " + dir.string(), 3};
    }
  }
  if (has_idx(root)) {
    const bool fashion = root.string().find("fashion") != std::string::npos;
    return {fashion ? "fashion-mnist" : "mnist", root.string(),
            "--data_path holds MNIST-format idx files in " + root.string(), 1};
  }
  KINDLING_CHECK(false, "cifar10: --data_path '", config.data_path,
                 "' holds neither CIFAR-10's binary version (data_batch_1.bin ... data_batch_5.bin and test_batch.bin, "
                 "directly or in cifar-10-batches-bin) nor MNIST-format files (train-images-idx3-ubyte[.gz] ...); "
                 "point it at one of them, or leave it out for Debian's Fashion-MNIST");
  return {};
}

Datasets get_train_test_datasets(const DataChoice& choice, const Config& config) {
  std::shared_ptr<const data::Dataset> train, test;
  std::vector<data::Transform> train_steps, test_steps;
  std::vector<double> mean, stddev;
  if (choice.dataset == "cifar10") {
    train = std::make_shared<data::CIFAR10>(choice.root, true);
    test = std::make_shared<data::CIFAR10>(choice.root, false);
    mean = {0.485, 0.456, 0.406};
    stddev = {0.229, 0.224, 0.225};
  } else {
    train = std::make_shared<data::MNIST>(choice.root, true);
    test = std::make_shared<data::MNIST>(choice.root, false);
    // 28x28 -> 32x32, the size the tutorial's pipeline and model expect.
    train_steps.push_back(tf::Pad(2));
    test_steps.push_back(tf::Pad(2));
    mean = {choice.dataset == "mnist" ? 0.1307 : 0.2860};
    stddev = {choice.dataset == "mnist" ? 0.3081 : 0.3530};
  }
  train_steps.insert(train_steps.end(), {tf::Pad(4), tf::RandomCrop(32), tf::RandomHorizontalFlip(),
                                         tf::ToTensor(), tf::Normalize(mean, stddev)});
  test_steps.insert(test_steps.end(), {tf::ToTensor(), tf::Normalize(mean, stddev)});
  return {std::make_shared<data::TransformedDataset>(first(train, config.train_subset),
                                                     tf::Compose(std::move(train_steps))),
          std::make_shared<data::TransformedDataset>(first(test, config.test_subset),
                                                     tf::Compose(std::move(test_steps)))};
}

Dataflow get_dataflow(const DataChoice& choice, const Config& config) {
  namespace kd = kindling::dist;
  // Rank 0 reads first (on a shared file system it warms the cache); a failure there is
  // broadcast so that every rank reports it rather than waiting for data that will not come.
  std::optional<Datasets> datasets;
  std::string failure;
  if (kd::get_rank() == 0) {
    try {
      datasets = get_train_test_datasets(choice, config);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  if (kd::get_world_size() > 1) failure = kd::broadcast(failure, 0);
  if (!failure.empty()) {
    throw kindling::Error("cifar10: the data in '" + choice.root + "' could not be read (rank 0): " + failure);
  }
  if (!datasets) datasets = get_train_test_datasets(choice, config);
  auto train = kd::auto_dataloader(datasets->train, data::DataLoaderOptions()
                                                        .batch_size(config.batch_size)
                                                        .num_workers(config.num_workers)
                                                        .shuffle(true)
                                                        .drop_last(true));
  auto test = kd::auto_dataloader(datasets->test, data::DataLoaderOptions()
                                                      .batch_size(2 * config.batch_size)
                                                      .num_workers(config.num_workers)
                                                      .shuffle(false)
                                                      .pad_shards(false));
  return {std::move(train), std::move(test)};
}

}  // namespace cifar10
