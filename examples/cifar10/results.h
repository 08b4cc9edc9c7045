// What a run of the cifar10 example measured: the metrics of each validation, training
// throughput and epoch times, peak memory per rank. Printed as a table at the end and
// written as summary.json for scripts (bench/cifar10 reads it).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cifar10 {

struct Validation {
  int64_t epoch = 0;
  double train_accuracy = 0, train_loss = 0, test_accuracy = 0, test_loss = 0;
};

struct Results {
  std::string dataset, backend, output_path;
  int world_size = 1;
  int64_t batch_size = 0;
  std::vector<Validation> validations;
  std::vector<double> epoch_seconds;               // per epoch, evaluation included
  std::vector<double> train_samples_per_s;         // per epoch, training iterations only, whole job
  std::vector<double> peak_rss_mb;                 // per rank
  std::map<std::string, double> iteration_split_ms;  // --profile: median ms per part (profile.h)
};

/// The peak resident memory of this process (VmHWM), in MiB; 0 where /proc has no value.
double peak_rss_mb();

/// The median over epochs of training samples/s, leaving out the first epoch (start-up
/// costs) when there are at least 3. 0 without epochs.
double typical_samples_per_s(const Results& results);

/// The end-of-run table: one row per validation (epoch, train/test accuracy and loss),
/// then throughput and the output folder.
std::string table(const Results& results);

/// Writes `<output_path>/summary.json` atomically ({"implementation": "kindling", ...}, the
/// format bench/cifar10/train_torch.py writes too). Throws kindling::Error when it cannot.
void write_summary(const Results& results);

}  // namespace cifar10
