// The mpi backend: kindling's Communicator on Open MPI. Collectives run as blocking MPI
// calls when waited on (Open MPI's blocking collectives are the fast ones), guarded by a
// watchdog that ends the job with a clear message after the timeout; point-to-point uses
// MPI_Isend / MPI_Irecv polled with MPI_Testall until done or timed out. MPI errors are
// returned (MPI_ERRORS_RETURN), not fatal, and become kindling errors naming the MPI call.
#include "dist/backends/mpi/mpi_backend.h"
#include "dist/backends/mpi/mpi_op.h"
#include "dist/backends/mpi/progress_store.h"
#include "dist/backends/mpi/shm_allreduce.h"

#include "dist/backends/mpi/mpi_c.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cstdlib>
#include <limits>

#include "launch/watchdog.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace detail {
namespace {

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// True when outs[i] are consecutive, equally sized slices of one contiguous buffer.
bool consecutive(const std::vector<at::Tensor>& outs) {
  if (outs.empty()) return false;
  const auto bytes = outs[0].nbytes();
  auto* base = static_cast<char*>(outs[0].data_ptr());
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].is_contiguous() || outs[i].nbytes() != bytes ||
        static_cast<char*>(outs[i].data_ptr()) != base + i * bytes) {
      return false;
    }
  }
  return true;
}

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    shm_ = ShmAllreduce::create(comm_);
  }
  ~MpiCommunicator() override {
    shm_.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  OpPtr all_reduce(at::Tensor& t, ReduceOp op) override {
    if (shm_ && shm_->handles(t, op)) {
      auto p = std::make_unique<MpiOp>("all_reduce (shared memory)", std::vector<at::Tensor>{t});
      ShmAllreduce* shm = shm_.get();
      at::Tensor target = t;
      p->defer_timed([shm, target, op](std::chrono::milliseconds timeout, const StallCheck* stalled) mutable {
        shm->run(target, op, timeout, stalled);
      });
      return p;
    }
    auto p = std::make_unique<MpiOp>("MPI_Allreduce", std::vector<at::Tensor>{t});
    const auto type = mpi_type(t.scalar_type(), true);
    const auto mop = mpi_op(op, t.scalar_type());
    const int count = count_of(t);
    void* data = t.data_ptr();
    MPI_Comm comm = comm_;
    p->defer([=] { return MPI_Allreduce(MPI_IN_PLACE, data, count, type, mop, comm); });
    return p;
  }

  OpPtr broadcast(at::Tensor& t, int root) override {
    auto p = std::make_unique<MpiOp>("MPI_Bcast", std::vector<at::Tensor>{t});
    const auto type = mpi_type(t.scalar_type(), false);
    const int count = count_of(t);
    void* data = t.data_ptr();
    MPI_Comm comm = comm_;
    p->defer([=] { return MPI_Bcast(data, count, type, root, comm); });
    return p;
  }

  OpPtr all_gather(std::vector<at::Tensor>& outputs, at::Tensor& input) override {
    const bool direct = consecutive(outputs);
    at::Tensor flat = direct ? at::Tensor() : at::empty({size_, input.numel()}, input.options());
    std::vector<at::Tensor> outs = outputs;
    auto p =
        std::make_unique<MpiOp>("MPI_Allgather", std::vector<at::Tensor>{input, flat}, [outs, flat, direct]() mutable {
          if (!direct) {
            for (std::size_t i = 0; i < outs.size(); ++i) outs[i].view({-1}).copy_(flat[static_cast<int64_t>(i)]);
          }
        });
    void* dst = direct ? outputs[0].data_ptr() : flat.data_ptr();
    const auto type = mpi_type(input.scalar_type(), false);
    const int count = count_of(input);
    void* src = input.data_ptr();
    MPI_Comm comm = comm_;
    p->defer([=] { return MPI_Allgather(src, count, type, dst, count, type, comm); });
    return p;
  }

  OpPtr reduce(at::Tensor& t, int root, ReduceOp op) override {
    auto p = std::make_unique<MpiOp>("MPI_Reduce", std::vector<at::Tensor>{t});
    const void* send = rank_ == root ? MPI_IN_PLACE : t.data_ptr();
    const auto type = mpi_type(t.scalar_type(), true);
    const auto mop = mpi_op(op, t.scalar_type());
    const int count = count_of(t);
    void* data = t.data_ptr();
    MPI_Comm comm = comm_;
    p->defer([=] { return MPI_Reduce(send, data, count, type, mop, root, comm); });
    return p;
  }

  OpPtr gather(std::vector<at::Tensor>& outputs, at::Tensor& input, int root) override {
    const bool is_root = rank_ == root;
    const bool direct = is_root && consecutive(outputs);
    at::Tensor flat = (is_root && !direct) ? at::empty({size_, input.numel()}, input.options()) : at::Tensor();
    std::vector<at::Tensor> outs = outputs;
    auto p = std::make_unique<MpiOp>("MPI_Gather", std::vector<at::Tensor>{input, flat},
                                     [outs, flat, is_root, direct]() mutable {
                                       if (is_root && !direct) {
                                         for (std::size_t i = 0; i < outs.size(); ++i)
                                           outs[i].view({-1}).copy_(flat[static_cast<int64_t>(i)]);
                                       }
                                     });
    void* dst = !is_root ? nullptr : (direct ? outputs[0].data_ptr() : flat.data_ptr());
    const auto type = mpi_type(input.scalar_type(), false);
    const int count = count_of(input);
    void* src = input.data_ptr();
    MPI_Comm comm = comm_;
    p->defer([=] { return MPI_Gather(src, count, type, dst, count, type, root, comm); });
    return p;
  }

  OpPtr scatter(at::Tensor& output, std::vector<at::Tensor>& inputs, int root) override {
    const bool is_root = rank_ == root;
    at::Tensor flat;
    if (is_root) {
      std::vector<at::Tensor> pieces;
      for (auto& in : inputs) pieces.push_back(in.reshape({1, -1}));
      flat = at::cat(pieces, 0);
    }
    auto p = std::make_unique<MpiOp>("MPI_Scatter", std::vector<at::Tensor>{output, flat});
    const auto type = mpi_type(output.scalar_type(), false);
    const int count = count_of(output);
    void* src = is_root ? flat.data_ptr() : nullptr;
    void* dst = output.data_ptr();
    MPI_Comm comm = comm_;
    p->defer([=] { return MPI_Scatter(src, count, type, dst, count, type, root, comm); });
    return p;
  }

  OpPtr all_to_all(at::Tensor& output, at::Tensor& input, std::vector<int64_t> output_splits,
                   std::vector<int64_t> input_splits) override {
    auto to_counts = [&](const std::vector<int64_t>& splits, int64_t total) {
      std::vector<int> counts(static_cast<std::size_t>(size_)), displs(static_cast<std::size_t>(size_));
      int64_t offset = 0;
      for (int i = 0; i < size_; ++i) {
        const int64_t c = splits.empty() ? total / size_ : splits[static_cast<std::size_t>(i)];
        KINDLING_CHECK(offset + c <= std::numeric_limits<int>::max(),
                       "kindling::dist::all_to_all: the mpi backend moves "
                       "at most 2^31-1 elements per call");
        counts[static_cast<std::size_t>(i)] = static_cast<int>(c);
        displs[static_cast<std::size_t>(i)] = static_cast<int>(offset);
        offset += c;
      }
      return std::make_pair(counts, displs);
    };
    auto send = std::make_shared<std::pair<std::vector<int>, std::vector<int>>>(to_counts(input_splits, input.numel()));
    auto recv =
        std::make_shared<std::pair<std::vector<int>, std::vector<int>>>(to_counts(output_splits, output.numel()));
    // The count arrays must live until the operation completes.
    auto p = std::make_unique<MpiOp>("MPI_Alltoallv", std::vector<at::Tensor>{input, output}, [send, recv]() {});
    const auto type = mpi_type(input.scalar_type(), false);
    void* src = input.data_ptr();
    void* dst = output.data_ptr();
    MPI_Comm comm = comm_;
    p->defer([=] {
      return MPI_Alltoallv(src, send->first.data(), send->second.data(), type, dst, recv->first.data(),
                           recv->second.data(), type, comm);
    });
    return p;
  }

  OpPtr barrier() override {
    auto p = std::make_unique<MpiOp>("MPI_Barrier", std::vector<at::Tensor>{});
    MPI_Comm comm = comm_;
    p->defer([=] { return MPI_Barrier(comm); });
    return p;
  }

  at::Tensor empty_buffer(at::IntArrayRef sizes, const at::TensorOptions& options) override {
    return shm_ && options.device().is_cpu() ? shm_->empty(sizes, options) : at::empty(sizes, options);
  }

  OpPtr send(at::Tensor& t, int dst, int tag) override {
    auto p = std::make_unique<MpiOp>("MPI_Isend", std::vector<at::Tensor>{t});
    check(MPI_Isend(t.data_ptr(), count_of(t), mpi_type(t.scalar_type(), false), dst, tag, comm_, p->add_request()),
          "MPI_Isend");
    return p;
  }

  OpPtr recv(at::Tensor& t, int src, int tag) override {
    auto p = std::make_unique<MpiOp>("MPI_Irecv", std::vector<at::Tensor>{t});
    check(MPI_Irecv(t.data_ptr(), count_of(t), mpi_type(t.scalar_type(), false), src < 0 ? MPI_ANY_SOURCE : src, tag,
                    comm_, p->add_request()),
          "MPI_Irecv");
    return p;
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<ShmAllreduce> shm_;  // null when the members span nodes
};

class MpiBackend : public Backend {
 public:
  explicit MpiBackend(MPI_Comm world) : world_comm_(world) { world_ = std::make_shared<MpiCommunicator>(world); }
  std::string name() const override { return "mpi"; }
  std::shared_ptr<Communicator> world() override { return world_; }
  std::shared_ptr<Communicator> create_group(int, const std::vector<int>& ranks, int group_rank) override {
    MPI_Comm comm = MPI_COMM_NULL;
    check(MPI_Comm_split(world_comm_, group_rank >= 0 ? 0 : MPI_UNDEFINED, group_rank, &comm), "MPI_Comm_split");
    if (group_rank < 0) return nullptr;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    return std::make_shared<MpiCommunicator>(comm);
  }
  c10::intrusive_ptr<c10d::Store> store() override { return {}; }
  MonitorTarget monitor_target() override { return progress_; }
  std::optional<NodeLayout> layout() override { return layout_; }

  std::optional<NodeLayout> layout_;
  MonitorTarget progress_;  // empty when stall detection is off

 private:
  MPI_Comm world_comm_;
  std::shared_ptr<Communicator> world_;
};

}  // namespace

std::unique_ptr<Backend> make_mpi_backend(const WorldConfig& config) {
  // MPI_Init and the first collectives wait, without a timeout, for every rank of the job to
  // start MPI. A rank that never will would leave the others waiting silently for ever: the
  // stall period (the timeout when stall detection is off) bounds that wait; the rank then ends
  // with code 124, as the mpi timeouts, so that mpirun or srun stops the job (MPI_Abort is not
  // allowed before MPI_Init returns).
  ::kindling::detail::Watchdog::Verdict verdict;
  verdict.what = "kindling::dist::initialize(\"mpi\")";
  verdict.cause = "MPI_Init waits for every rank without a timeout: a rank did not start the mpi backend (every "
                  "rank must use mpi; a gloo or serial rank never joins MPI) or is stuck before initialize.";
  verdict.exit_code = 124;
  ::kindling::detail::Watchdog watch(std::move(verdict), "MPI connecting the ranks of this job",
                                     config.stall_period.count() > 0 ? config.stall_period : config.timeout);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  KINDLING_CHECK(!finalized,
                 "kindling::dist::initialize(\"mpi\"): MPI was already finalized in this process and cannot "
                 "start again; initialize the mpi backend once per process");
  int provided = 0;
  if (!initialized) {
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    KINDLING_CHECK_T(CommunicationError, rc == MPI_SUCCESS,
                     "kindling::dist::initialize(\"mpi\"): MPI_Init_thread failed: ", mpi_error(rc));
    std::atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&provided);
  }
  KINDLING_CHECK(provided >= MPI_THREAD_MULTIPLE,
                 "kindling::dist::initialize(\"mpi\"): this MPI library provides thread "
                 "level ",
                 provided, " but kindling needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE,
                 "); use an MPI built with thread support (Debian's Open MPI has it)");
  MPI_Comm world = MPI_COMM_NULL;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  if (size != config.world_size || rank != config.rank) {
    MPI_Comm_free(&world);
    KINDLING_CHECK(false, "kindling::dist::initialize(\"mpi\"): MPI says rank ", rank, " of ", size, " but the ",
                   config.launcher, " environment says rank ", config.rank, " of ", config.world_size,
                   ". MPI programs are started by mpirun or srun --mpi=pmix, e.g. `mpirun -np ", config.world_size,
                   " ./program`; kindling-run, torchrun and Parallel's spawn start processes MPI does not know about");
  }
  auto backend = std::make_unique<MpiBackend>(world);
  // The node layout from MPI itself: ranks that share memory are one node.
  MPI_Comm node = MPI_COMM_NULL;
  check(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  NodeLayout l;
  MPI_Comm_rank(node, &l.local_rank);
  MPI_Comm_size(node, &l.nproc_per_node);
  int leader = l.local_rank == 0 ? 1 : 0, before = 0;
  check(MPI_Exscan(&leader, &before, 1, MPI_INT, MPI_SUM, world), "MPI_Exscan");
  if (rank == 0) before = 0;  // MPI_Exscan leaves rank 0's result undefined
  // A node's index: the number of node leaders with a smaller rank (ranks of a node are
  // contiguous with mpirun's default mapping); the leader's value is shared with its node.
  int node_index = l.local_rank == 0 ? before : 0;
  check(MPI_Bcast(&node_index, 1, MPI_INT, 0, node), "MPI_Bcast");
  l.node_rank = node_index;
  check(MPI_Allreduce(&leader, &l.nnodes, 1, MPI_INT, MPI_SUM, world), "MPI_Allreduce");
  MPI_Comm_free(&node);
  backend->layout_ = l;
  if (size > 1 && config.stall_period.count() > 0) backend->progress_ = open_progress_store(world, rank, config.timeout);
  return backend;
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
