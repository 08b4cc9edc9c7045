// dist_tutorial: the programs of PyTorch's "Writing Distributed Applications" tutorial,
// written with kindling::dist and LibTorch's C++ frontend: point-to-point messages, a
// collective on a group, a hand-made ring all-reduce (plus the chunked ring the tutorial
// leaves as an exercise) and synchronous SGD with gradient averaging on Fashion-MNIST.
//
//   ./dist_tutorial                          # every command, on 2 processes it starts itself
//   ./dist_tutorial p2p
//   ./dist_tutorial ring-allreduce --numel 4194304 --iters 20
//   ./dist_tutorial train --epochs 1 --limit 12000 --nproc-per-node 3
//   kindling-run --nproc_per_node 2 ./dist_tutorial group-allreduce   # under a launcher
//
// `./dist_tutorial p2p` prints (the order of lines between ranks may vary):
//   dist_tutorial p2p: 2 rank(s), backend gloo, device cpu
//   == p2p: blocking send / recv ==
//   Rank 0 has data 1
//   Rank 1 has data 1
//   == p2p: non-blocking isend / irecv ==
//   Rank 0 started sending
//   Rank 1 started receiving
//   Rank 0 has data 1
//   Rank 1 has data 1
// and `train` prints one "Rank <r>, epoch <e>: loss <mean batch loss>" line per rank and
// epoch, then "test accuracy <pct>%" from rank 0.
#include <torch/torch.h>

#include <kindling/dist/auto.h>
#include <kindling/dist/launch_env.h>
#include <kindling/dist/parallel.h>
#include <kindling/kindling.h>
#include <kindling/data/datasets.h>
#include <kindling/data/loader.h>
#include <kindling/data/transforms.h>
#include <kindling/nn/ddp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <iterator>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "ring_all_reduce.h"

namespace kd = kindling::dist;
namespace kdata = kindling::data;

namespace {

constexpr int kDefaultNprocPerNode = 2;

const char* const kCommands[] = {"p2p", "group-allreduce", "ring-allreduce", "train", "all"};

/// Everything the command line sets; passed to every rank by Parallel::run.
struct Options {
  std::string command = "all";
  std::string backend = "gloo";
  std::optional<int> nproc_per_node;  // unset: kDefaultNprocPerNode, or the launcher's layout
  std::optional<int> master_port;     // unset: a free port
  int64_t numel = int64_t{1} << 20;
  int iters = 10;
  int epochs = 3;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t limit = -1;  // -1: every training sample
  uint64_t seed = 1234;
  std::string sync = "ddp";  // train: "ddp" (kindling::dist::auto_model) or "manual" (the tutorial's average_gradients)
};

// ---------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------

/// Binds every option of the program to `o` (tools/cli/cli.h gives --help and the errors).
void describe_options(CLI::App& app, Options& o) {
  app.description(
      "The programs of PyTorch's \"Writing Distributed Applications\" tutorial on kindling::dist.\n"
      "Commands: p2p (blocking send/recv, then isend/irecv + wait; >= 2 ranks), group-allreduce\n"
      "(all_reduce over the group {0, 1}; >= 2 ranks), ring-allreduce (the tutorial's ring all-reduce\n"
      "and a chunked one, checked against and timed with kindling::dist::all_reduce), train\n"
      "(synchronous SGD with gradient averaging on Fashion-MNIST), all (all of them, in this order).");
  app.add_option("command", o.command, "What to run (default: all)")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kCommands), std::end(kCommands))));
  app.add_option("--backend", o.backend, "gloo (default), serial, nccl or mpi");
  app.add_option("--nproc-per-node", o.nproc_per_node,
                 "Processes to start on this node (default 2); under a launcher (kindling-run, torchrun, mpirun, "
                 "srun) leave it out, or give the number the launcher starts on each node")
      ->check(CLI::Range(1, 1024));
  app.add_option("--master-port", o.master_port,
                 "Rendezvous port when this program starts the processes (default: a free port, so that two jobs "
                 "on one machine do not collide; under a launcher the launcher's port is used)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--numel", o.numel, "ring-allreduce: floats per tensor")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--iters", o.iters, "ring-allreduce: timed calls per implementation")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--epochs", o.epochs, "train: number of epochs")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--data-dir", o.data_dir, "train: directory of the Fashion-MNIST *-ubyte.gz files")
      ->capture_default_str();
  app.add_option("--limit", o.limit, "train: use only the first N training samples (default: all 60000)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--sync", o.sync,
                 "train: gradients averaged by kindling's DistributedDataParallel (ddp: auto_model, overlapped "
                 "with backward) or by the tutorial's average_gradients after backward (manual)")
      ->check(CLI::IsMember({"ddp", "manual"}))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the model initialization and random inputs")->capture_default_str();
}

// ---------------------------------------------------------------------------------------
// Output helpers
// ---------------------------------------------------------------------------------------

/// Prints one line with a single write, so lines of different ranks do not interleave.
template <typename... Parts>
void say(const Parts&... parts) {
  std::ostringstream line;
  (line << ... << parts);
  line << '\n';
  std::cout << line.str() << std::flush;
}

std::string fixed(double value, int digits) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(digits);
  out << value;
  return out.str();
}

/// A title printed by rank 0, fenced by barriers so that it comes before the section's
/// output of every rank. Every rank must call it.
void section(const std::string& title) {
  kd::barrier();
  if (kd::get_rank() == 0) say("== ", title, " ==");
  kd::barrier();
}

/// p2p and group-allreduce need two ranks: alone they fail with a clear message, as part
/// of `all` they are skipped with a note.
bool enough_ranks(const std::string& command, bool skip) {
  const int size = kd::get_world_size();
  if (size >= 2) return true;
  KINDLING_CHECK(skip, "dist_tutorial ", command, " needs at least 2 ranks, but the world has ", size,
                 "; run it with --nproc-per-node 2 (or more) and a distributed --backend such as gloo");
  say("(skipping ", command, ": it needs at least 2 ranks and the world has ", size, ")");
  return false;
}

// ---------------------------------------------------------------------------------------
// p2p: blocking and non-blocking point-to-point
// ---------------------------------------------------------------------------------------

void report_data(int rank, const torch::Tensor& tensor, float expected) {
  const float value = tensor[0].item<float>();
  say("Rank ", rank, " has data ", value);
  KINDLING_CHECK_T(kindling::Error, value == expected, "dist_tutorial p2p: rank ", rank, " holds ", value,
                   " after the transfer instead of ", expected);
}

void run_p2p() {
  const int rank = kd::get_rank();
  const auto on_device = torch::TensorOptions().device(kd::device());

  // send() and recv() return once the message is handed over or has arrived. Rank 1 must
  // own a tensor of the right size to receive into. Ranks above 1 sit this one out.
  section("p2p: blocking send / recv");
  if (rank <= 1) {
    torch::Tensor tensor = torch::zeros({1}, on_device);
    if (rank == 0) {
      tensor.add_(1);
      kd::send(tensor, /*dst=*/1);
    } else {
      kd::recv(tensor, /*src=*/0);
    }
    report_data(rank, tensor, 1.0f);
  }

  // isend() / irecv() return at once with a Work handle. Until wait() returns, rank 0 must
  // not write its tensor and rank 1 must not read its own.
  section("p2p: non-blocking isend / irecv");
  if (rank <= 1) {
    torch::Tensor tensor = torch::zeros({1}, on_device);
    kd::Work request;
    if (rank == 0) {
      tensor.add_(1);
      request = kd::isend(tensor, /*dst=*/1);
      say("Rank 0 started sending");
    } else {
      request = kd::irecv(tensor, /*src=*/0);
      say("Rank 1 started receiving");
    }
    request.wait();
    report_data(rank, tensor, 1.0f);
  }
}

// ---------------------------------------------------------------------------------------
// group-allreduce: a collective on a subset of the ranks
// ---------------------------------------------------------------------------------------

void run_group_all_reduce() {
  const int rank = kd::get_rank();
  section("group-allreduce: all_reduce(SUM) over the group {0, 1}");
  // Every rank of the world creates the group, members or not, in the same order.
  const kd::Group group = kd::new_group({0, 1});
  torch::Tensor tensor = torch::ones({1}, torch::TensorOptions().device(kd::device()));
  kd::all_reduce(tensor, kd::ReduceOp::kSum, group);  // in place; non-members keep theirs
  const float value = tensor[0].item<float>();
  if (!group.is_member()) {
    say("Rank ", rank, " is not in the group and keeps ", value);
    return;
  }
  say("Rank ", rank, " has data ", value);
  KINDLING_CHECK_T(kindling::Error, value == static_cast<float>(group.size()), "dist_tutorial group-allreduce: rank ",
                   rank, " got ", value, " instead of ", group.size());
}

// ---------------------------------------------------------------------------------------
// ring-allreduce: hand-made rings against the built-in all_reduce
// ---------------------------------------------------------------------------------------

/// Mean seconds per call of `fn` over `iters` calls, as seen by the slowest rank. Every
/// rank must call it.
template <typename Fn>
double seconds_per_call(int iters, Fn&& fn) {
  kd::barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
  return kd::all_reduce(mine, kd::ReduceOp::kMax);
}

void print_timing(const std::string& name, double seconds, double reference) {
  char line[200];
  std::snprintf(line, sizeof line, "  %-46s %10.3f ms %8.2fx", name.c_str(), seconds * 1e3,
                reference > 0 ? seconds / reference : 0.0);
  say(line);
}

void run_ring_all_reduce(const Options& o) {
  const int rank = kd::get_rank();
  const int size = kd::get_world_size();
  section("ring-allreduce: ring all-reduce from isend / recv");

  struct Implementation {
    const char* name;
    torch::Tensor (*all_reduce)(const torch::Tensor&);
  };
  const Implementation implementations[] = {
      {"ring (tutorial)", &dist_tutorial::ring_all_reduce},
      {"chunked ring (reduce-scatter + all-gather)", &dist_tutorial::chunked_ring_all_reduce},
  };

  // Different data on every rank, reproducible from --seed.
  torch::manual_seed(o.seed + static_cast<uint64_t>(rank));
  const torch::Tensor input = torch::randn({o.numel}, torch::TensorOptions().device(kd::device()));
  const torch::Tensor expected = kd::all_reduce(input.clone());

  // Correctness first. The sums are added in other orders than the built-in's, so allow
  // float rounding. Every rank learns every rank's verdict, so all of them fail together.
  for (const auto& impl : implementations) {
    const torch::Tensor got = impl.all_reduce(input);
    const bool close = torch::allclose(got, expected, /*rtol=*/1e-5, /*atol=*/1e-5);
    const double error = kd::all_reduce((got - expected).abs().max().item<double>(), kd::ReduceOp::kMax);
    const int64_t wrong = kd::all_reduce(static_cast<int64_t>(close ? 0 : 1));
    if (rank == 0 && wrong == 0) {
      say(impl.name, ": same result as kindling::dist::all_reduce on all ", size, " ranks (max |error| ", error, ")");
    }
    KINDLING_CHECK_T(kindling::Error, wrong == 0, "dist_tutorial ring-allreduce: ", impl.name,
                     " differs from kindling::dist::all_reduce on ", wrong, " of ", size, " ranks (max |error| ", error,
                     ", tolerance 1e-5)");
  }

  // Timing: every variant pays for one copy of the input, as the built-in reduces in place.
  const double builtin = seconds_per_call(o.iters, [&] { kd::all_reduce(input.clone()); });
  std::vector<double> seconds;
  for (const auto& impl : implementations) {
    seconds.push_back(seconds_per_call(o.iters, [&] { impl.all_reduce(input); }));
  }
  if (rank == 0) {
    say("mean time per call over ", o.iters, " calls, ", o.numel, " floats (",
        fixed(static_cast<double>(o.numel) * 4 / (1 << 20), 2), " MiB), slowest of ", size,
        " ranks; ratio to built-in:");
    print_timing("kindling::dist::all_reduce (built-in)", builtin, builtin);
    for (std::size_t i = 0; i < seconds.size(); ++i) print_timing(implementations[i].name, seconds[i], builtin);
  }
}

// ---------------------------------------------------------------------------------------
// train: distributed synchronous SGD
// ---------------------------------------------------------------------------------------

/// The tutorial's network (PyTorch's classic MNIST example): two convolutions, dropout,
/// two fully connected layers, log-probabilities out.
struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv1_(torch::nn::Conv2dOptions(1, 10, /*kernel_size=*/5)),
        conv2_(torch::nn::Conv2dOptions(10, 20, /*kernel_size=*/5)),
        fc1_(320, 50),
        fc2_(50, 10) {
    register_module("conv1", conv1_);
    register_module("conv2", conv2_);
    register_module("conv2_drop", conv2_drop_);
    register_module("fc1", fc1_);
    register_module("fc2", fc2_);
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(torch::max_pool2d(conv1_->forward(x), 2));                        // [n, 10, 12, 12]
    x = torch::relu(torch::max_pool2d(conv2_drop_->forward(conv2_->forward(x)), 2));  // [n, 20, 4, 4]
    x = x.view({-1, 320});
    x = torch::relu(fc1_->forward(x));
    x = torch::dropout(x, /*p=*/0.5, /*train=*/is_training());
    return torch::log_softmax(fc2_->forward(x), /*dim=*/1);
  }

  torch::nn::Conv2d conv1_;
  torch::nn::Conv2d conv2_;
  torch::nn::Dropout2d conv2_drop_;
  torch::nn::Linear fc1_;
  torch::nn::Linear fc2_;
};
TORCH_MODULE(Net);

/// The tutorial's average_gradients: sum every gradient over the ranks, divide by their
/// number. All ranks then take the same optimizer step and stay identical. Every rank must
/// call it after backward(), with the same model.
void average_gradients(torch::nn::Module& model) {
  const double size = kd::get_world_size();
  for (const auto& parameter : model.parameters()) {
    torch::Tensor grad = parameter.grad();  // shares the gradient's storage
    if (!grad.defined()) continue;          // unused parameter: no rank has a gradient
    kd::all_reduce(grad, kd::ReduceOp::kSum);
    grad.div_(size);
  }
}

/// Fails on every rank unless all ranks hold bit-identical parameters: the elementwise
/// maximum and minimum over the ranks must agree. Every rank must call it.
void check_replicas_identical(torch::nn::Module& model) {
  std::vector<torch::Tensor> pieces;
  for (const auto& parameter : model.parameters()) pieces.push_back(parameter.detach().reshape({-1}));
  const torch::Tensor mine = torch::cat(pieces);
  const torch::Tensor high = kd::all_reduce(mine.clone(), kd::ReduceOp::kMax);
  const torch::Tensor low = kd::all_reduce(mine.clone(), kd::ReduceOp::kMin);
  KINDLING_CHECK_T(kindling::Error, torch::equal(high, low),
                   "dist_tutorial train: the model parameters differ across ranks after training (largest spread ",
                   (high - low).abs().max().item<double>(), " over ", mine.numel(),
                   " values); the gradient averaging did not keep the replicas in sync");
  if (kd::get_rank() == 0) {
    say("parameters identical on all ", kd::get_world_size(), " ranks (", mine.numel(), " values checked)");
  }
}

/// The tutorial's DataPartitioner for equal fractions: shuffles 0..n-1 with std::mt19937
/// seeded with `seed` (the same on every rank, so the parts are disjoint) and returns the
/// `part`-th of `parts` consecutive slices of n / parts indices (the remainder is dropped,
/// so every rank gets the same number of samples and runs the same number of steps).
std::vector<int64_t> partition_indices(int64_t n, int parts, int part, uint32_t seed) {
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::mt19937 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  const int64_t length = n / parts;
  return std::vector<int64_t>(order.begin() + part * length, order.begin() + (part + 1) * length);
}

/// Fashion-MNIST's training-pixel mean and standard deviation (after scaling to [0, 1]).
constexpr double kFashionMnistMean = 0.2860;
constexpr double kFashionMnistStd = 0.3530;

/// A Fashion-MNIST split as float tensors: ToTensor then Normalize, applied per sample.
std::shared_ptr<const kdata::Dataset> fashion_mnist(const std::string& dir, bool train, int64_t limit) {
  auto raw = kdata::Subset::first(std::make_shared<kdata::FashionMNIST>(dir, train), limit);
  return std::make_shared<kdata::TransformedDataset>(
      raw, kdata::transforms::Compose(
               {kdata::transforms::ToTensor(), kdata::transforms::Normalize({kFashionMnistMean}, {kFashionMnistStd})}));
}

/// Fraction of `split` that `model` classifies correctly.
double accuracy(NetImpl& model, std::shared_ptr<const kdata::Dataset> split, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  model.eval();
  kdata::DataLoader loader(split, kdata::DataLoaderOptions().batch_size(1000).num_workers(2));
  int64_t correct = 0;
  for (const auto& batch : loader) {
    const torch::Tensor output = model.forward(batch.data.to(device));
    correct += output.argmax(1).eq(batch.target.to(device)).sum().item<int64_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(split->size());
}

void run_train(const Options& o) {
  const int rank = kd::get_rank();
  const int size = kd::get_world_size();
  const torch::Device device = kd::device();
  section("train: synchronous SGD with gradient averaging on Fashion-MNIST");

  // Rank 0 also opens the test set now, so a missing file is reported before any
  // training time is spent.
  const auto train = fashion_mnist(o.data_dir, /*train=*/true, o.limit);
  std::shared_ptr<const kdata::Dataset> test;
  if (rank == 0) test = fashion_mnist(o.data_dir, /*train=*/false, -1);
  KINDLING_CHECK(train->size() >= size, "dist_tutorial train: ", train->size(),
                 " training samples cannot be split across ", size, " ranks; raise --limit to at least ", size);

  // The same seed on every rank gives every replica the same initial weights; then each
  // rank draws its own dropout masks, as it sees its own data.
  torch::manual_seed(o.seed);
  Net model;
  model->to(device);
  // The global batch is 128 samples in both variants.
  std::optional<kindling::nn::DistributedDataParallel<NetImpl>> ddp;
  std::optional<kdata::DataLoader> loader;
  if (o.sync == "ddp") {
    // auto_model wraps the model in kindling's DistributedDataParallel: backward() then
    // returns with gradients already averaged over the ranks. auto_dataloader gives each
    // rank 128 / size samples per batch from a DistributedSampler, loaded by worker threads.
    ddp = kd::auto_model(model);
    loader = kd::auto_dataloader(train,
                                 kdata::DataLoaderOptions().batch_size(128).shuffle(true).seed(o.seed).num_workers(2));
  } else {
    // The tutorial's way: a fixed part of the data per rank (DataPartitioner), shuffled
    // within the rank each epoch, batch 128 / size.
    auto part = partition_indices(train->size(), size, rank, /*seed=*/1234);
    loader = kdata::DataLoader(train, kdata::DataLoaderOptions()
                                          .batch_size(std::max(1, 128 / size))
                                          .sampler(std::make_shared<kdata::SubsetRandomSampler>(
                                              std::move(part), o.seed + static_cast<uint64_t>(rank)))
                                          .num_workers(2));
  }
  torch::manual_seed(o.seed + 1 + static_cast<uint64_t>(rank));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));
  if (rank == 0) {
    say(size, " rank(s) x ", loader->sampler()->size(), " samples, batch size ", loader->options().batch_size(),
        " per rank, ", loader->size(), " steps per epoch, ", o.epochs, " epoch(s), gradients averaged by ",
        ddp ? "DistributedDataParallel (auto_model), data from auto_dataloader" : "average_gradients");
  }

  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    model->train();
    loader->set_epoch(epoch);  // a new shuffle each epoch
    double epoch_loss = 0.0;
    for (const auto& batch : *loader) {
      const torch::Tensor data = batch.data.to(device);
      const torch::Tensor target = batch.target.to(device);
      optimizer.zero_grad();
      const torch::Tensor loss = torch::nll_loss(ddp ? ddp->forward(data) : model->forward(data), target);
      epoch_loss += loss.item<double>();
      loss.backward();
      if (!ddp) average_gradients(*model);
      optimizer.step();
    }
    say("Rank ", rank, ", epoch ", epoch, ": loss ", fixed(epoch_loss / static_cast<double>(loader->size()), 4));
  }

  check_replicas_identical(*model);
  if (rank == 0) say("test accuracy ", fixed(100.0 * accuracy(*model, test, device), 2), "%");
  kd::barrier();  // the others wait while rank 0 evaluates, so nobody leaves the job early
}

// ---------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------

/// What every rank runs (Parallel::run calls it with the local rank).
void run_command(int /*local_rank*/, const Options& o) {
  const bool all = o.command == "all";
  if (kd::get_rank() == 0) {
    say("dist_tutorial ", o.command, ": ", kd::get_world_size(), " rank(s), backend ", kd::backend(), ", device ",
        kd::device().str());
  }
  if ((all || o.command == "p2p") && enough_ranks("p2p", all)) run_p2p();
  if ((all || o.command == "group-allreduce") && enough_ranks("group-allreduce", all)) run_group_all_reduce();
  if (all || o.command == "ring-allreduce") run_ring_all_reduce(o);
  if (all || o.command == "train") run_train(o);
}

/// Spawns kDefaultNprocPerNode processes unless told otherwise, but not under a launcher
/// (nor in the children a Parallel parent starts): there the launcher's layout applies.
kd::ParallelOptions parallel_options(const Options& o) {
  kd::ParallelOptions options(o.backend);
  if (o.nproc_per_node) {
    options.nproc_per_node(*o.nproc_per_node);
  } else if (o.backend != "serial" && !kd::detect_launch_environment().detected()) {
    options.nproc_per_node(kDefaultNprocPerNode);
  }
  if (o.master_port) options.master_port(*o.master_port);
  options.timeout(std::chrono::minutes(10));  // a stuck collective fails instead of hanging for 30 minutes
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"", "dist_tutorial"};
  describe_options(app, options);
  if (const int rc = kindling::cli::parse(app, argc, argv); rc >= 0) return rc;
  try {
    // Started directly, this spawns --nproc-per-node copies of the program (each one
    // re-executes main and runs run_command); under a launcher it only initializes.
    kd::Parallel parallel(parallel_options(options));
    parallel.run(run_command, options);
  } catch (const std::exception& e) {
    std::cerr << "dist_tutorial: error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
