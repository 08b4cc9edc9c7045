// Command line of the cifar10 example (CLI11) and its dataset-dependent defaults.
#include "config.h"

#include <CLI/CLI.hpp>

#include <sstream>
#include <system_error>

#include <kindling/error.h>

#include "cli/cli.h"
#include "timeline.h"

namespace cifar10 {

namespace {

// --diloco_*: training that averages every H steps (kindling/nn/diloco.h); not with DDP's hook
// or sharding, which change the every-step average DiLoCo replaces.
void add_diloco_options(CLI::App& app, Config& c, CLI::Option* hook, CLI::Option* sharding) {
  const auto count = [](int64_t lo) { return CLI::Range(lo, int64_t{1} << 40); };
  auto* every = app.add_option("--diloco_every", c.diloco_every,
                               "DiLoCo: inner steps between two averages of the weights (0: DDP's average at every "
                               "step); the other --diloco_ options need it")
                    ->check(count(0))
                    ->capture_default_str()
                    ->excludes(hook)
                    ->excludes(sharding);
  app.add_option("--diloco_outer_lr", c.diloco_outer_lr,
                 "The outer SGD's learning rate (1 with momentum 0: local SGD, the mean weights; the paper's 0.7 "
                 "with momentum 0.9 pairs with AdamW inside, and diverged with this SGD inside)")
      ->check(kindling::cli::finite_number(kindling::cli::kPositiveNumber))
      ->capture_default_str()
      ->needs(every);
  app.add_option("--diloco_outer_momentum", c.diloco_outer_momentum, "The outer SGD's Nesterov momentum (0: none)")
      ->check(kindling::cli::finite_number({0, 1}))
      ->capture_default_str()
      ->needs(every);
  app.add_option("--diloco_fragments", c.diloco_fragments, "Streaming DiLoCo: pieces of the model averaged at staggered steps")
      ->check(count(1))
      ->capture_default_str()
      ->needs(every);
  app.add_option("--diloco_delay", c.diloco_delay, "Inner steps a piece's exchange overlaps before it is applied")
      ->check(count(0))
      ->capture_default_str()
      ->needs(every);
  app.add_option("--diloco_exchange", c.diloco_exchange, "The pseudo-gradient on the wire: float32, bf16 or fp16")
      ->check(CLI::IsMember({"float32", "bf16", "fp16"}))
      ->capture_default_str()
      ->needs(every);
  app.add_option("--diloco_warmup", c.diloco_warmup, "Synchronous steps (DDP's average) before the local ones")
      ->check(count(0))
      ->capture_default_str()
      ->needs(every);
  app.add_flag("--diloco_per_host", c.diloco_per_host,
               "Workers are hosts: DDP's average inside each host, DiLoCo between hosts")
      ->needs(every);
}

}  // namespace

int parse_command_line(int argc, char** argv, Config& c) {
  CLI::App app{
      "The PyTorch-Ignite CIFAR10 tutorial in C++: ResNet18 trained data-parallel with kindling, on CIFAR-10 "
      "(binary version, in --data_path) or, by default, Debian's Fashion-MNIST",
      "cifar10"};
  app.set_config("--config", "",
                 "Read options from a TOML or INI file (name = value per line; unknown names are refused)");
  app.allow_config_extras(false);  // a misspelt key is an error, not silently ignored
  const auto count = [](int64_t lo) { return CLI::Range(lo, int64_t{1} << 40); };
  app.add_option("--seed", c.seed, "Random seed (each rank adds its rank)")->capture_default_str();
  app.add_option("--data_path", c.data_path,
                 "Folder of CIFAR-10's binary version (data_batch_1.bin ... test_batch.bin, or its "
                 "cifar-10-batches-bin folder) or of Fashion-MNIST's idx files; default: Debian's Fashion-MNIST");
  app.add_option("--output_path", c.output_path, "Where the run's folder is made")->capture_default_str();
  app.add_option("--model", c.model, "resnet18, resnet34 or resnet50")
      ->check(CLI::IsMember({"resnet18", "resnet34", "resnet50"}))
      ->capture_default_str();
  app.add_option("--batch_size", c.batch_size, "Training batch over all ranks (the test batch is twice it)")
      ->check(count(1))
      ->capture_default_str();
  app.add_option("--momentum", c.momentum, "SGD momentum (Nesterov)")
      ->check(kindling::cli::finite_number({0, 1}))
      ->capture_default_str();
  app.add_option("--weight_decay", c.weight_decay, "SGD weight decay")
      ->check(kindling::cli::finite_number({}))
      ->capture_default_str();
  app.add_option("--num_workers", c.num_workers, "Loader worker threads per rank")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--num_epochs", c.num_epochs, "Epochs (default: 24 on CIFAR-10, 3 on Fashion-MNIST)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--learning_rate", c.learning_rate,
                 "Peak learning rate (default: 0.4 on CIFAR-10, 0.1 on Fashion-MNIST)")
      ->check(kindling::cli::finite_number(kindling::cli::kPositiveNumber));
  app.add_option("--num_warmup_epochs", c.num_warmup_epochs,
                 "Epochs of linear warm-up from 0, then linear decay to 0 (default: 4 on CIFAR-10, 1 on Fashion-MNIST)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--validate_every", c.validate_every, "Evaluate train and test sets every N epochs (and at the end)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--checkpoint_every", c.checkpoint_every, "Iterations between training checkpoints")
      ->check(count(1))
      ->capture_default_str();
  app.add_option("--backend", c.backend, "gloo, mpi, nccl or none (default: gloo when several processes run)")
      ->check(CLI::IsMember({"", "none", "gloo", "mpi", "nccl"}));
  app.add_option("--resume_from", c.resume_from,
                 "A training checkpoint (training_checkpoint_<iteration>.pt) to continue");
  app.add_option("--log_every_iters", c.log_every_iters, "Iterations between progress and loss logs (0: none)")
      ->check(count(0))
      ->capture_default_str();
  app.add_option("--nproc_per_node", c.nproc_per_node,
                 "Processes to start on this machine (under a launcher: leave it out, or give the launcher's count)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--stop_iteration", c.stop_iteration, "End the run after this iteration, as a crash would")
      ->check(count(1));
  app.add_flag("--with_amp", c.with_amp, "Automatic mixed precision (float16 on CUDA, bfloat16 on CPU)");
  auto* hook = app.add_option("--comm_hook", c.comm_hook,
                 "How DDP averages gradients: none (float32 all-reduce), fp16, bf16 or powersgd")
      ->check(CLI::IsMember({"none", "fp16", "bf16", "powersgd"}))
      ->capture_default_str();
  auto* sharding = app.add_option("--sharding", c.sharding,
                 "Split weights, gradients and SGD's state across the ranks: none (DDP), zero2 (weights whole in "
                 "forward and backward) or zero3 (each ResNet layer gathered only while it computes); not with "
                 "--comm_hook (DDP's)")
      ->check(CLI::IsMember({"none", "zero2", "zero3"}))
      ->capture_default_str()
      ->excludes(hook);
  add_diloco_options(app, c, hook, sharding);
  app.add_option("--powersgd_rank", c.powersgd_rank, "PowerSGD's matrix approximation rank")
      ->check(count(1))
      ->capture_default_str();
  app.add_option("--powersgd_start_iter", c.powersgd_start_iter, "The first iteration PowerSGD compresses")
      ->check(count(0))
      ->capture_default_str();
  app.add_option("--train_subset", c.train_subset, "Use only the first N training samples (0: all)")->check(count(0));
  app.add_option("--test_subset", c.test_subset, "Use only the first N test samples (0: all)")->check(count(0));
  app.add_option("--collective_timeout", c.collective_timeout_s, "Seconds a collective may wait for a peer")
      ->check(count(1))
      ->capture_default_str();
  app.add_option("--stall_timeout", c.stall_timeout_s,
                 "Seconds without collective progress of a peer before the waiting ranks stop and name it "
                 "(0: off; default: KINDLING_STALL_TIMEOUT, else 60)")
      ->check(kindling::cli::finite_number(kindling::cli::kStallTimeoutSeconds));
  app.add_flag("--profile", c.profile,
               "Split each training iteration's time (data, forward, backward, all-reduce wait, optimizer); "
               "medians in the table and summary.json");
  app.add_option("--timeline", c.timeline,
                 "N:M: every rank's iterations N to M as a Chrome trace, in the run folder's timeline/ (open it in "
                 "Perfetto or chrome://tracing)")
      ->check([](const std::string& text) {
        try {
          timeline_range(text);
          return std::string();
        } catch (const std::exception& e) {
          return std::string(e.what());
        }
      });
  app.add_option("--max_restarts", c.max_restarts,
                 "With --nproc_per_node: when a process fails, restart all of them at most this many times; the "
                 "restarted run continues from the run folder's last checkpoint (under a launcher, use its option)")
      ->check(CLI::Range(0, 1000));
  return kindling::cli::parse(app, argc, argv);
}

std::string apply_dataset_defaults(Config& c, const std::string& dataset) {
  const bool cifar = dataset == "cifar10";
  if (!c.num_epochs) c.num_epochs = cifar ? 24 : 3;
  if (!c.learning_rate) c.learning_rate = cifar ? 0.4 : 0.1;
  if (!c.num_warmup_epochs) c.num_warmup_epochs = cifar ? 4 : 1;
  return cifar ? "CIFAR-10 defaults: the tutorial's schedule (peak learning rate 0.4, 4 warm-up epochs, 24 epochs)"
               : "Fashion-MNIST defaults: peak learning rate 0.1, 1 warm-up epoch, 3 epochs (0.4 trains poorly there)";
}

std::vector<std::pair<std::string, std::string>> describe(const Config& c) {
  auto text = [](auto v) {
    std::ostringstream out;
    out << v;
    return out.str();
  };
  auto optional = [&](const auto& v) { return v ? text(*v) : std::string("None"); };
  auto or_none = [](const std::string& s) { return s.empty() ? std::string("None") : s; };
  return {{"seed", text(c.seed)},
          {"data_path", or_none(c.data_path)},
          {"output_path", c.output_path},
          {"model", c.model},
          {"batch_size", text(c.batch_size)},
          {"momentum", text(c.momentum)},
          {"weight_decay", text(c.weight_decay)},
          {"num_workers", text(c.num_workers)},
          {"num_epochs", optional(c.num_epochs)},
          {"learning_rate", optional(c.learning_rate)},
          {"num_warmup_epochs", optional(c.num_warmup_epochs)},
          {"validate_every", text(c.validate_every)},
          {"checkpoint_every", text(c.checkpoint_every)},
          {"backend", or_none(c.backend)},
          {"resume_from", or_none(c.resume_from)},
          {"log_every_iters", text(c.log_every_iters)},
          {"nproc_per_node", optional(c.nproc_per_node)},
          {"stop_iteration", optional(c.stop_iteration)},
          {"with_amp", c.with_amp ? "True" : "False"},
          {"comm_hook", c.comm_hook},
          {"sharding", c.sharding},
          {"powersgd_rank", text(c.powersgd_rank)},
          {"powersgd_start_iter", text(c.powersgd_start_iter)},
          {"diloco_every", text(c.diloco_every)},
          {"diloco_outer_lr", text(c.diloco_outer_lr)},
          {"diloco_outer_momentum", text(c.diloco_outer_momentum)},
          {"diloco_fragments", text(c.diloco_fragments)},
          {"diloco_delay", text(c.diloco_delay)},
          {"diloco_exchange", c.diloco_exchange},
          {"diloco_warmup", text(c.diloco_warmup)},
          {"diloco_per_host", c.diloco_per_host ? "True" : "False"},
          {"train_subset", text(c.train_subset)},
          {"test_subset", text(c.test_subset)},
          {"max_restarts", text(c.max_restarts)},
          {"profile", c.profile ? "True" : "False"},
          {"timeline", or_none(c.timeline)}};
}

std::filesystem::file_status path_status(const std::string& option, const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory) {
    throw kindling::UsageError("cifar10: " + option + " '" + path + "' cannot be examined (" + ec.message() +
                               "); check the path and the permissions of its folders");
  }
  return status;
}

}  // namespace cifar10
