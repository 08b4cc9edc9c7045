// bench_ddp's command line (options.h).
#include "options.h"

#include <string>

namespace bench {

namespace {

// ZeRO's comm hook is the whole reduction (it takes no inner hook) and ZeRO is the optimizer:
// --zero (or --zero-overlap) with another hook or with --in-backward would drop one of the two.
void refuse_conflicts(const Options& o) {
  if (o.diloco_every > 0 && (o.comm_hook != "none" || o.zero || o.zero_overlap || o.in_backward || o.sharding != "none"))
    throw CLI::ValidationError("--diloco-every with --comm-hook, --zero, --in-backward or --sharding: DiLoCo replaces "
                               "the every-step average those change; drop one of the two");
  if (!(o.zero || o.zero_overlap)) return;
  const std::string zero = o.zero_overlap ? "--zero-overlap" : "--zero";
  if (o.comm_hook != "none")
    throw CLI::ValidationError(zero + " with --comm-hook " + o.comm_hook +
                               ": ZeRO's comm hook reduce-scatters every bucket itself and wraps no other hook, so " +
                               o.comm_hook + " would not run; drop one of the two");
  if (o.in_backward)
    throw CLI::ValidationError(zero +
                               " with --in-backward: both choose the optimizer (ZeroRedundancyOptimizer, "
                               "OptimizerInBackward); drop one of the two (--zero-overlap is ZeRO's own stepping "
                               "inside backward)");
}

// --diloco-every and its settings: kindling::nn::DiLoCo over the SGD, DDP with its hook.
void describe_diloco_options(CLI::App& app, Options& o) {
  app.add_option("--diloco-every", o.diloco_every, "DiLoCo: steps between synchronisations (0: DDP's average every step)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--diloco-fragments", o.diloco_fragments, "Streaming DiLoCo: pieces at staggered steps")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--diloco-delay", o.diloco_delay, "Streaming DiLoCo: steps a piece's exchange overlaps")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--diloco-exchange", o.diloco_exchange, "The pseudo-gradient on the wire: float32, bf16 or fp16")
      ->check(CLI::IsMember({"float32", "bf16", "fp16"}))
      ->capture_default_str();
  app.add_flag("--local-sgd", o.local_sgd, "DiLoCo's outer step the mean weights (local SGD) instead of Nesterov SGD");
}

}  // namespace

// Binds every option to `o` (tools/cli/cli.h gives --help and the errors).
void describe_options(CLI::App& app, Options& o) {
  app.add_option("--mode", o.mode, "step (a training step) or loader (auto_dataloader alone)")
      ->check(CLI::IsMember({"step", "loader"}))
      ->capture_default_str();
  app.add_option("--model", o.model, "mlp or resnet18")
      ->check(CLI::IsMember({"mlp", "resnet18"}))
      ->capture_default_str();
  app.add_option("--mlp-width", o.mlp_width, "The MLP's hidden width")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--mlp-depth", o.mlp_depth, "The MLP's hidden layers")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--backend", o.backend, "gloo or mpi")->capture_default_str();
  app.add_option("--data-dir", o.data_dir, "Fashion-MNIST directory")->capture_default_str();
  app.add_option("--batch", o.batch, "Samples per rank and step")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--steps", o.steps, "Timed steps")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--warmup", o.warmup, "Untimed steps first")->check(CLI::Range(0, 1000000))->capture_default_str();
  app.add_option("--threads", o.threads, "Intra-op threads per rank")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--bucket-cap-mb", o.bucket_cap_mb, "DDP bucket size")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str();
  app.add_option("--comm-hook", o.comm_hook, "DDP communication hook: none, fp16, bf16 or powersgd")
      ->check(CLI::IsMember({"none", "fp16", "bf16", "powersgd"}))
      ->capture_default_str();
  app.add_option("--powersgd-rank", o.powersgd_rank, "PowerSGD's matrix approximation rank")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--powersgd-start", o.powersgd_start, "PowerSGD's start_powerSGD_iter (keep it below --warmup)")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  app.add_flag("--flat", o.flat, "Never the hierarchical all-reduce (DdpOptions::hierarchical_allreduce(false))");
  app.add_flag("--copy-gradients", o.copy_gradients,
               "Copy gradients into the buckets and back (DdpOptions::gradient_as_bucket_view(false))");
  app.add_option("--autotune-mb", o.autotune_mb,
                 "Bucket sizes for DDP's autotune (DdpOptions::autotune_bucket_cap_mb), during the warmup steps")
      ->delimiter(',');
  app.add_flag("--in-backward", o.in_backward,
               "The optimizer as kindling::nn::OptimizerInBackward (each bucket steps when its average is in); with "
               "--sharding: ShardedModel::step_in_backward (each unit steps when its reduction is in)");
  app.add_flag("--timeline", o.timeline,
               "Record the timed steps on the timeline (kindling/timeline.h: the step's parts, DDP's, each collective)");
  app.add_flag("--zero", o.zero,
               "The optimizer as kindling::nn::ZeroRedundancyOptimizer (ZeRO-1: its comm hook, 1/N of the state)");
  app.add_flag("--zero-overlap", o.zero_overlap,
               "--zero with ZeroOptions::overlap_with_ddp (each bucket's chunk stepped and sent inside backward)");
  app.add_option("--replica-check-every", o.replica_check_every,
                 "Compare the replicas (kindling::dist::check_replicas) after every N-th timed step, timed apart")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  app.add_option("--sharding", o.sharding, "none (DDP), zero2 or zero3: the model sharded (SGD over its shards)")
      ->check(CLI::IsMember({"none", "zero2", "zero3"}))
      ->capture_default_str();
  describe_diloco_options(app, o);
  app.add_option("--workers", o.workers, "loader: worker threads")->check(CLI::Range(0, 1024))->capture_default_str();
  app.add_option("--epochs", o.epochs, "loader: epochs")->check(CLI::Range(1, 100000))->capture_default_str();
  app.callback([&o] { refuse_conflicts(o); });
}

}  // namespace bench
