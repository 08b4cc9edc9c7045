// Data of the cifar10 example: the tutorial's CIFAR-10 pipeline, or Fashion-MNIST (the
// embedded default) with a matching one, and the loaders auto_dataloader makes of them.
#pragma once

#include <kindling/data/dataset.h>
#include <kindling/data/loader.h>

#include <memory>
#include <string>

#include "config.h"

namespace cifar10 {

/// What --data_path holds. Checked on every rank before anything is read, so that a wrong
/// path is the same clear error everywhere.
struct DataChoice {
  std::string dataset;  // "cifar10", "fashion-mnist" or "mnist"
  std::string root;     // the folder the dataset class reads
  std::string why;      // a sentence for the log
  int64_t channels = 1;
};

/// Throws kindling::UsageError naming the path and what it should hold when --data_path
/// holds neither CIFAR-10's binary files nor MNIST-format idx files.
DataChoice choose_data(const Config& config);

struct Datasets {
  std::shared_ptr<const kindling::data::Dataset> train, test;  // with their transforms
};

/// Reads both splits (throws kindling::Error naming the file for damaged data) and adds the
/// tutorial's transforms: training Pad(4), RandomCrop(32), RandomHorizontalFlip, ToTensor,
/// Normalize; test ToTensor, Normalize. Fashion-MNIST's 28x28 images are first padded to
/// 32x32. Local: every rank reads its own copy.
Datasets get_train_test_datasets(const DataChoice& choice, const Config& config);

struct Dataflow {
  kindling::data::DataLoader train, test;
};

/// The datasets, read by rank 0 first (its failure is told to every rank, which then
/// throws it too instead of waiting), then the loaders from auto_dataloader: training
/// batches of batch_size over all ranks, shuffled, drop_last; test batches of twice that,
/// sharded without padding so that the metrics count each sample once. All ranks call it.
Dataflow get_dataflow(const DataChoice& choice, const Config& config);

}  // namespace cifar10
