// The tutorial's configuration: its names and defaults, read from the command line and,
// optionally, a TOML/INI file (--config, CLI11's own reader).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cifar10 {

struct Config {
  int64_t seed = 543;
  std::string data_path;  // empty: the embedded default data (Debian's Fashion-MNIST)
  std::string output_path = "output-cifar10/";
  std::string model = "resnet18";
  int64_t batch_size = 512;  // over all ranks, as the tutorial's (auto_dataloader divides it)
  double momentum = 0.9;
  double weight_decay = 1e-4;
  int num_workers = 2;
  // Dataset-dependent defaults (see apply_dataset_defaults): set only when given.
  std::optional<int> num_epochs;
  std::optional<double> learning_rate;
  std::optional<int> num_warmup_epochs;
  int validate_every = 3;
  int64_t checkpoint_every = 200;
  std::string backend;  // empty: gloo when more than one process runs, else none
  std::string resume_from;
  int64_t log_every_iters = 15;
  std::optional<int> nproc_per_node;
  std::optional<int64_t> stop_iteration;  // end the run after this iteration (simulates a crash)
  bool with_amp = false;
  std::string comm_hook = "none";  // DDP communication hook: none, fp16, bf16 or powersgd
  std::string sharding = "none";   // none (DDP), zero2 or zero3 (kindling/nn/sharding.h)
  int64_t powersgd_rank = 1;        // PowerSGD's matrix_approximation_rank
  int64_t powersgd_start_iter = 1000;
  // DiLoCo (kindling/nn/diloco.h): 0 steps = DDP's average at every step.
  int64_t diloco_every = 0;               // inner steps between synchronisations (H)
  // The outer SGD: by default the weights' mean (local SGD). The paper's 0.7 with Nesterov's 0.9
  // pairs with AdamW inside; with the tutorial's SGD (momentum 0.9) inside it diverged (2 ranks,
  // H = 8, 2 short epochs: loss 1,700 against 1.27 for the mean).
  double diloco_outer_lr = 1.0;
  double diloco_outer_momentum = 0.0;     // Nesterov's when > 0
  int64_t diloco_fragments = 1;           // streaming: pieces at staggered steps
  int64_t diloco_delay = 0;               // inner steps a piece's exchange overlaps
  std::string diloco_exchange = "float32";  // float32, bf16 or fp16 on the wire
  int64_t diloco_warmup = 0;              // synchronous steps first
  bool diloco_per_host = false;           // DDP inside a host, DiLoCo between hosts
  // Beyond the tutorial: small runs for tests and benchmarks.
  int64_t train_subset = 0;  // 0: the whole training split
  int64_t test_subset = 0;
  int64_t collective_timeout_s = 600;
  std::optional<double> stall_timeout_s;  // unset: KINDLING_STALL_TIMEOUT, else the library's 60 s
  int max_restarts = 0;                   // with --nproc_per_node: restarts after a failure
  bool profile = false;                   // split rank 0's training iterations (profile.h)
  std::string timeline;                   // N:M: a Chrome trace of those iterations (timeline.h)
};

/// Parses the command line (and --config) into `config`. Returns -1 to go on, else the
/// exit code (0 after --help, 2 after a usage error, with CLI11's message).
int parse_command_line(int argc, char** argv, Config& config);

/// The defaults that depend on the data, for options not given: the tutorial's on CIFAR-10
/// (24 epochs, learning rate 0.4, 4 warm-up epochs); on Fashion-MNIST, where 0.4 does not
/// train well, 3 epochs at 0.1 with 1 warm-up epoch (above 88% test accuracy in about 6
/// minutes on 2 cores). Returns a sentence saying which.
std::string apply_dataset_defaults(Config& config, const std::string& dataset);

/// What is at `path`, given by the command-line `option` ("--data_path"): a missing path is
/// file_type::not_found; throws kindling::UsageError naming the option, the path and the
/// system's reason when the path cannot be examined (no permission, a loop of links).
std::filesystem::file_status path_status(const std::string& option, const std::string& path);

/// The configuration as (name, value) text, in the tutorial's order, for logs and reports.
std::vector<std::pair<std::string, std::string>> describe(const Config& config);

}  // namespace cifar10
