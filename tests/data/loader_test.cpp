// DataLoader (order, batching, worker threads, determinism, errors, early exit),
// Sequential/Random/DistributedProxy samplers, and auto_dataloader's rules on real ranks.
#include <gtest/gtest.h>
#include <kindling/dist/auto.h>
#include <kindling/data/loader.h>
#include <kindling/kindling.h>

#include <atomic>
#include <set>
#include <sstream>
#include <thread>

#include "support/multiprocess.h"

namespace kd = kindling::dist;
namespace data = kindling::data;
using kindling::testing::describe;
using kindling::testing::LaunchOptions;
using kindling::testing::run_workers;

namespace {

// Sample i: data = [i, a draw from sample_rng()], target = i % 3. Optionally slow, or
// failing at one index.
class Probe : public data::Dataset {
 public:
  explicit Probe(int64_t n, int64_t fail_at = -1, int sleep_us = 0) : n_(n), fail_at_(fail_at), sleep_us_(sleep_us) {}
  int64_t size() const override { return n_; }
  data::Example get(int64_t i) const override {
    if (i == fail_at_) throw std::runtime_error("probe cannot read sample " + std::to_string(i));
    if (sleep_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    calls_.fetch_add(1);
    const double draw = static_cast<double>(data::sample_rng()() % 1000003);
    return {at::tensor({static_cast<double>(i), draw}, at::kDouble), at::scalar_tensor(i % 3, at::kLong)};
  }
  std::string name() const override { return "Probe(" + std::to_string(n_) + ")"; }
  int64_t calls() const { return calls_.load(); }

 private:
  int64_t n_, fail_at_;
  int sleep_us_;
  mutable std::atomic<int64_t> calls_{0};
};

std::vector<data::Example> one_epoch(data::DataLoader& loader) {
  std::vector<data::Example> out;
  for (const auto& batch : loader) out.push_back(batch);
  return out;
}

std::vector<int64_t> visited(const std::vector<data::Example>& batches) {
  std::vector<int64_t> out;
  for (const auto& b : batches) {
    auto col = b.data.select(1, 0);
    for (int64_t k = 0; k < col.size(0); ++k) out.push_back(static_cast<int64_t>(col[k].item<double>()));
  }
  return out;
}

TEST(DataLoader, SequentialBatchesInOrderWithLastPartialBatch) {
  auto ds = std::make_shared<Probe>(23);
  data::DataLoader loader(ds, data::DataLoaderOptions().batch_size(5));
  EXPECT_EQ(loader.size(), 5);
  auto batches = one_epoch(loader);
  ASSERT_EQ(batches.size(), 5u);
  EXPECT_EQ(batches[0].data.sizes(), (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(batches[0].target.sizes(), (std::vector<int64_t>{5}));
  EXPECT_EQ(batches[4].data.size(0), 3);
  std::vector<int64_t> expect(23);
  for (int i = 0; i < 23; ++i) expect[i] = i;
  EXPECT_EQ(visited(batches), expect);
  EXPECT_EQ(batches[1].target[0].item<int64_t>(), 5 % 3);
}

TEST(DataLoader, DropLast) {
  data::DataLoader loader(std::make_shared<Probe>(23), data::DataLoaderOptions().batch_size(5).drop_last(true));
  EXPECT_EQ(loader.size(), 4);
  EXPECT_EQ(one_epoch(loader).size(), 4u);
}

TEST(DataLoader, EmptyDatasetGivesNoBatches) {
  data::DataLoader loader(std::make_shared<Probe>(0), data::DataLoaderOptions().batch_size(4).num_workers(2));
  EXPECT_EQ(loader.size(), 0);
  EXPECT_TRUE(one_epoch(loader).empty());
}

// The same batches, bit for bit, with 0, 1, 3 and 8 workers; the random draws depend on
// (seed, epoch, index) only.
TEST(DataLoader, WorkersDoNotChangeBatchesAndSeedsAreReproducible) {
  auto ds = std::make_shared<Probe>(101, -1, 50);
  auto run = [&](int64_t workers, uint64_t seed, int64_t epoch) {
    data::DataLoader loader(ds, data::DataLoaderOptions().batch_size(8).shuffle(true).seed(seed).num_workers(workers));
    loader.set_epoch(epoch);
    return one_epoch(loader);
  };
  const auto reference = run(0, 7, 2);
  ASSERT_EQ(reference.size(), 13u);
  for (int64_t workers : {1, 3, 8}) {
    const auto other = run(workers, 7, 2);
    ASSERT_EQ(other.size(), reference.size());
    for (std::size_t b = 0; b < reference.size(); ++b) {
      EXPECT_TRUE(at::equal(other[b].data, reference[b].data)) << workers << " workers, batch " << b;
      EXPECT_TRUE(at::equal(other[b].target, reference[b].target));
    }
  }
  auto order = visited(reference);
  std::set<int64_t> unique(order.begin(), order.end());
  EXPECT_EQ(unique.size(), 101u) << "every sample once";
  std::vector<int64_t> sorted(order.begin(), order.end());
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(order, sorted) << "shuffled";
  EXPECT_NE(visited(run(0, 8, 2)), order) << "another seed, another order";
  EXPECT_NE(visited(run(0, 7, 3)), order) << "another epoch, another order";
  // The shuffle is torch.randperm(n) with a generator seeded by seed + epoch.
  data::RandomSampler rs(101, 7);
  rs.set_epoch(2);
  EXPECT_EQ(order, rs.indices());
}

TEST(DataLoader, EpochAdvancesByItselfUnlessSet) {
  auto ds = std::make_shared<Probe>(30);
  data::DataLoader loader(ds, data::DataLoaderOptions().batch_size(30).shuffle(true).num_workers(2));
  EXPECT_EQ(loader.epoch(), 0);
  auto e0 = visited(one_epoch(loader));
  EXPECT_EQ(loader.epoch(), 1);
  auto e1 = visited(one_epoch(loader));
  EXPECT_NE(e0, e1);
  loader.set_epoch(0);
  EXPECT_EQ(visited(one_epoch(loader)), e0);
}

TEST(DataLoader, WorkerErrorReachesTheConsumerWithContext) {
  for (int64_t workers : {0, 3}) {
    data::DataLoader loader(std::make_shared<Probe>(40, 17),
                            data::DataLoaderOptions().batch_size(4).num_workers(workers));
    try {
      one_epoch(loader);
      ADD_FAILURE() << "no error with " << workers << " workers";
    } catch (const kindling::Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("loading sample 17 of Probe(40) (batch 4, epoch 0) failed: probe cannot read sample 17"),
                std::string::npos)
          << what;
    }
  }
}

// Leaving an epoch early stops the workers without loading the rest of it.
TEST(DataLoader, BreakingOutStopsWorkers) {
  auto ds = std::make_shared<Probe>(10000, -1, 100);
  data::DataLoader loader(ds, data::DataLoaderOptions().batch_size(10).num_workers(4).prefetch_factor(2));
  int seen = 0;
  for (const auto& batch : loader) {
    (void)batch;
    if (++seen == 3) break;
  }
  const int64_t calls = ds->calls();
  EXPECT_LE(calls, (3 + 4 * 2 + 4) * 10) << "loaded far ahead of the window";
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(ds->calls(), calls) << "workers still running after the epoch was left";
  // Starting a new epoch while holding an old iterator stops the old one.
  auto it = loader.begin();
  auto again = loader.begin();
  EXPECT_THROW(++it, kindling::Error);
  EXPECT_EQ((*again).data.size(0), 10);
}

TEST(DataLoader, OptionErrors) {
  auto ds = std::make_shared<Probe>(10);
  EXPECT_THROW(data::DataLoader(ds, data::DataLoaderOptions().batch_size(0)), kindling::Error);
  EXPECT_THROW(data::DataLoader(ds, data::DataLoaderOptions().num_workers(-1)), kindling::Error);
  try {
    data::DataLoader(ds,
                     data::DataLoaderOptions().shuffle(true).sampler(std::make_shared<data::SequentialSampler>(10)));
    ADD_FAILURE() << "shuffle + sampler accepted";
  } catch (const kindling::Error& e) {
    EXPECT_NE(std::string(e.what()).find("mutually exclusive"), std::string::npos) << e.what();
  }
}

TEST(DistributedProxySampler, ShardsAnySamplerDisjointly) {
  auto base = std::make_shared<data::RandomSampler>(10, 3);
  std::vector<int64_t> all;
  for (int rank = 0; rank < 3; ++rank) {
    data::DistributedProxySampler proxy(base, 3, rank);
    proxy.set_epoch(5);
    EXPECT_EQ(proxy.size(), 4);
    auto mine = proxy.indices();
    ASSERT_EQ(mine.size(), 4u);
    all.insert(all.end(), mine.begin(), mine.end());
  }
  // Positions 0..11 of the epoch-5 order of the wrapped sampler, padded from its start.
  base->set_epoch(5);
  auto order = base->indices();
  std::vector<int64_t> expect_sorted;
  for (int i = 0; i < 12; ++i) expect_sorted.push_back(order[i % 10]);
  std::sort(expect_sorted.begin(), expect_sorted.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, expect_sorted);
  EXPECT_THROW(data::DistributedProxySampler(std::make_shared<data::DistributedSampler>(
                                                 10, data::DistributedSamplerOptions().num_replicas(2).rank(0)),
                                             2, 0),
               kindling::Error);
  EXPECT_THROW(data::DistributedProxySampler(base, 2, 2), kindling::Error);
}

TEST(Subset, MapsIndicesAndChecksThem) {
  auto base = std::make_shared<Probe>(10);
  data::Subset sub(base, {7, 2, 9});
  EXPECT_EQ(sub.size(), 3);
  EXPECT_EQ(sub.get(1).data[0].item<double>(), 2.0);
  EXPECT_EQ(sub.name(), "Probe(10)[3 of 10]");
  EXPECT_EQ(data::Subset::first(base, 4)->size(), 4);
  EXPECT_EQ(data::Subset::first(base, -1)->size(), 10);
  EXPECT_EQ(data::Subset::first(base, 99)->size(), 10);
  try {
    data::Subset(base, {1, 10});
    ADD_FAILURE() << "index 10 accepted";
  } catch (const kindling::Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 10 (position 1) is out of range for Probe(10) of size 10"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(sub.get(3), kindling::UsageError);
}

TEST(SubsetRandomSampler, PermutesTheGivenIndicesPerEpoch) {
  const std::vector<int64_t> given{3, 8, 11, 20, 21, 40};
  data::SubsetRandomSampler s(given, 5);
  auto e0 = s.indices();
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, given);
  EXPECT_EQ(s.indices(), e0) << "deterministic for an epoch";
  s.set_epoch(1);
  EXPECT_NE(s.indices(), e0);
  EXPECT_EQ(s.size(), 6);
}

TEST(AutoDataloader, SerialChangesNothingButPinMemory) {
  auto loader =
      kd::auto_dataloader(std::make_shared<Probe>(10), data::DataLoaderOptions().batch_size(4).num_workers(3));
  EXPECT_EQ(loader.options().batch_size(), 4);
  EXPECT_EQ(loader.options().num_workers(), 3);
  EXPECT_EQ(loader.options().pin_memory(), std::optional<bool>(false));
  EXPECT_FALSE(loader.pins_memory());
  EXPECT_NE(dynamic_cast<data::SequentialSampler*>(loader.sampler().get()), nullptr);
}

// idist's table at world size = processes per node = 3 (the reference's test uses 4).
KINDLING_WORKER(auto_dataloader_rules) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(60)));
  const int rank = kd::get_rank();
  auto ds = std::make_shared<Probe>(20);
  auto with = [&](data::DataLoaderOptions o) { return kd::auto_dataloader(ds, std::move(o)); };
  WCHECK(with(data::DataLoaderOptions().batch_size(1)).options().batch_size() == 1);
  WCHECK(with(data::DataLoaderOptions().batch_size(10)).options().batch_size() == 3);
  WCHECK(with(data::DataLoaderOptions().batch_size(12)).options().batch_size() == 4);
  WCHECK(with(data::DataLoaderOptions().num_workers(1)).options().num_workers() == 1);
  WCHECK(with(data::DataLoaderOptions().num_workers(2)).options().num_workers() == 2);
  WCHECK(with(data::DataLoaderOptions().num_workers(10)).options().num_workers() == 4);
  // No sampler: a shuffling DistributedSampler; the ranks' shards cover the dataset.
  auto loader = with(data::DataLoaderOptions().batch_size(6).num_workers(2).seed(9));
  auto* ds_sampler = dynamic_cast<data::DistributedSampler*>(loader.sampler().get());
  WCHECK(ds_sampler != nullptr);
  WCHECK(ds_sampler->rank() == rank && ds_sampler->num_replicas() == 3);
  std::vector<double> mine;
  for (const auto& b : loader) {
    for (int64_t k = 0; k < b.data.size(0); ++k) mine.push_back(b.data[k][0].item<double>());
  }
  WCHECK(mine.size() == 7u, << mine.size());
  auto everything = kd::all_gather(at::tensor(mine, at::kDouble));
  std::set<int64_t> covered;
  for (int64_t k = 0; k < everything.size(0); ++k) covered.insert(static_cast<int64_t>(everything[k].item<double>()));
  WCHECK(covered.size() == 20u, << covered.size() << " distinct samples over the ranks");
  WCHECK(mine != std::vector<double>({static_cast<double>(rank), rank + 3.0, rank + 6.0, rank + 9.0, rank + 12.0,
                                      rank + 15.0, rank + 18.0}),
         << "not shuffled");
  // shuffle(false): rank r takes r, r + 3, ...
  auto plain = with(data::DataLoaderOptions().batch_size(30).shuffle(false));
  auto first = *plain.begin();
  WCHECK(first.data[1][0].item<double>() == rank + 3.0);
  // A user sampler is wrapped in a DistributedProxySampler; a DistributedSampler is kept.
  auto proxied = with(data::DataLoaderOptions().sampler(std::make_shared<data::RandomSampler>(20, 1)));
  WCHECK(dynamic_cast<data::DistributedProxySampler*>(proxied.sampler().get()) != nullptr);
  auto own =
      std::make_shared<data::DistributedSampler>(20, data::DistributedSamplerOptions().num_replicas(3).rank(rank));
  WCHECK(with(data::DataLoaderOptions().sampler(own)).sampler() == own);
  // A sampler made for another rank is reported by the rank that has it (here rank 2).
  auto wrong = std::make_shared<data::DistributedSampler>(
      20, data::DistributedSamplerOptions().num_replicas(3).rank(rank == 2 ? 0 : rank));
  with(data::DataLoaderOptions().sampler(wrong));
  kd::finalize();
}

TEST(AutoDataloader, DistributedRulesOnThreeRanks) {
  LaunchOptions opts;
  opts.world_size = 3;
  auto results = run_workers("auto_dataloader_rules", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
  // Rank 0 warns that 10 does not divide over 3 ranks, and prints the options it used.
  EXPECT_NE(results[0].err.find("batch_size 10 is not a multiple of the world size 3"), std::string::npos)
      << describe(results);
  EXPECT_NE(results[2].err.find("found a DistributedSampler with rank=0, but the process rank is 2"), std::string::npos)
      << describe(results);
  EXPECT_EQ(results[0].err.find("found a DistributedSampler with rank="), std::string::npos) << describe(results);
  EXPECT_NE(results[0].err.find("kindling::dist::auto_dataloader: Probe(20): batch_size=2, shuffle=false"),
            std::string::npos)
      << describe(results);
  EXPECT_EQ(results[1].err.find("auto_dataloader"), std::string::npos) << describe(results);
  // The shuffle it moved into the sampler is said where it went; shuffle(false) stays plain.
  EXPECT_NE(results[0].err.find("batch_size=2, shuffle=false (the DistributedSampler shuffles), num_workers=2"),
            std::string::npos)
      << describe(results);
  EXPECT_NE(results[0].err.find("batch_size=10, shuffle=false, num_workers"), std::string::npos) << describe(results);
}

}  // namespace
