#pragma once
// bench_ddp's command line: what it trains and how (main.cpp's file comment).
#include <CLI/CLI.hpp>

#include <kindling/data/datasets.h>

#include <string>
#include <vector>

namespace bench {

/// Every option of bench_ddp, with its default.
struct Options {
  std::string mode = "step";
  std::string model = "mlp";
  int64_t mlp_width = 1024;  // the MLP's hidden layers: their width and number
  int mlp_depth = 2;
  std::string backend = "gloo";
  std::string data_dir = kindling::data::kFashionMnistRoot;
  int64_t batch = 64;
  int steps = 100;
  int warmup = 10;
  int threads = 1;
  int64_t workers = 2;
  int epochs = 1;
  double bucket_cap_mb = 25;
  std::string comm_hook = "none";
  int64_t powersgd_rank = 1;
  int64_t powersgd_start = 2;
  bool flat = false;
  bool copy_gradients = false;
  bool zero = false;
  bool zero_overlap = false;
  bool timeline = false;
  bool in_backward = false;
  std::vector<double> autotune_mb;
  int replica_check_every = 0;
  std::string sharding = "none";  // none (DDP), zero2 or zero3: kindling/nn/sharding.h
  int64_t diloco_every = 0;       // DiLoCo's sync_every (0: DDP's average every step)
  int64_t diloco_fragments = 1;
  int64_t diloco_delay = 0;
  std::string diloco_exchange = "float32";
  bool local_sgd = false;         // DiLoCo's outer step the mean (DiLoCoOptions::local_sgd)
};

/// Binds every option to `o` and checks the combinations when parsed (CLI::ValidationError
/// naming the two options that conflict).
void describe_options(CLI::App& app, Options& o);

}  // namespace bench
