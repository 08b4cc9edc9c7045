// DistributedSampler against Python's torch.utils.data.DistributedSampler (Debian's
// python3-torch): the same indices for many sizes, replica counts, ranks, seeds, epochs,
// shuffle and drop_last settings.
#include <gtest/gtest.h>
#include <kindling/data/sampler.h>
#include <kindling/error.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "support/multiprocess.h"

namespace {

TEST(DistributedSampler, SameIndicesAsPython) {
  std::ostringstream input;
  std::vector<std::string> keys;
  for (int64_t size : {0, 1, 5, 10, 17, 100, 1001}) {
    for (int replicas : {1, 2, 3, 4, 7}) {
      for (int rank = 0; rank < replicas; ++rank) {
        for (int shuffle : {0, 1}) {
          for (int seed : {0, 42}) {
            for (int epoch : {0, 3}) {
              for (int drop_last : {0, 1}) {
                std::ostringstream key;
                key << size << ' ' << replicas << ' ' << rank << ' ' << shuffle << ' ' << seed << ' ' << epoch << ' '
                    << drop_last;
                keys.push_back(key.str());
                input << key.str() << "\n";
              }
            }
          }
        }
      }
    }
  }
  char tmpl[] = "/tmp/kindling-sampler-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  std::ofstream(dir + "/in.txt") << input.str();
  auto r = kindling::testing::run_command(
      {"/bin/sh", "-c",
       KINDLING_PYTHON " '" KINDLING_SOURCE_DIR "/tests/python/sampler_indices.py' < '" + dir + "/in.txt'"},
      {}, std::chrono::seconds(120));
  std::system(("rm -rf '" + dir + "'").c_str());
  ASSERT_TRUE(r.ok()) << kindling::testing::describe({r});
  std::map<std::string, std::string> python;
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    auto colon = line.find(':');
    if (colon != std::string::npos) python[line.substr(0, colon)] = line.substr(colon + 1);
  }
  ASSERT_EQ(python.size(), keys.size()) << r.err;
  int compared = 0;
  for (const auto& key : keys) {
    std::istringstream in(key);
    int64_t size;
    int replicas, rank, shuffle, seed, epoch, drop_last;
    in >> size >> replicas >> rank >> shuffle >> seed >> epoch >> drop_last;
    kindling::data::DistributedSampler sampler(size, kindling::data::DistributedSamplerOptions()
                                                         .num_replicas(replicas)
                                                         .rank(rank)
                                                         .shuffle(shuffle != 0)
                                                         .seed(static_cast<uint64_t>(seed))
                                                         .drop_last(drop_last != 0));
    sampler.set_epoch(epoch);
    std::string mine;
    for (int64_t i : sampler.indices()) mine += " " + std::to_string(i);
    EXPECT_EQ(mine, python[key]) << "size replicas rank shuffle seed epoch drop_last = " << key;
    EXPECT_EQ(static_cast<int64_t>(sampler.indices().size()), sampler.num_samples()) << key;
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(keys.size()));
}

TEST(DistributedSampler, RejectsBadArguments) {
  using kindling::data::DistributedSamplerOptions;
  EXPECT_THROW(kindling::data::DistributedSampler(10, DistributedSamplerOptions().num_replicas(2).rank(2)),
               kindling::UsageError);
  EXPECT_THROW(kindling::data::DistributedSampler(10, DistributedSamplerOptions().num_replicas(0).rank(0)),
               kindling::UsageError);
  EXPECT_THROW(kindling::data::DistributedSampler(-1, DistributedSamplerOptions().num_replicas(1).rank(0)),
               kindling::UsageError);
}

TEST(DistributedSampler, WithoutPaddingEverySampleOnceAndShardsMayBeEmpty) {
  using kindling::data::DistributedSampler;
  using kindling::data::DistributedSamplerOptions;
  for (int64_t n : {0, 1, 2, 10, 11, 12}) {
    for (int replicas : {1, 2, 3, 4}) {
      for (bool shuffle : {false, true}) {
        std::vector<int64_t> all;
        for (int r = 0; r < replicas; ++r) {
          DistributedSampler s(n,
                               DistributedSamplerOptions().num_replicas(replicas).rank(r).shuffle(shuffle).pad(false));
          s.set_epoch(3);
          const auto mine = s.indices();
          EXPECT_EQ(static_cast<int64_t>(mine.size()), s.size());
          EXPECT_EQ(s.size(), n > r ? (n - r + replicas - 1) / replicas : 0) << "n=" << n << " r=" << r;
          all.insert(all.end(), mine.begin(), mine.end());
        }
        std::sort(all.begin(), all.end());
        std::vector<int64_t> expected(static_cast<std::size_t>(n));
        for (int64_t i = 0; i < n; ++i) expected[static_cast<std::size_t>(i)] = i;
        EXPECT_EQ(all, expected) << "n=" << n << " replicas=" << replicas << " shuffle=" << shuffle;
      }
    }
  }
}

}  // namespace
