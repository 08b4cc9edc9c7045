// common/round.h: the one codec of a rendezvous round, as the server's line and as the live
// channel's file, and torchrun's variables of a worker in it.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "common/round.h"

namespace {

using kindling::detail::Round;

Round sample_round() {
  Round r;
  r.round = 7;
  r.restarts = 2;
  r.node_rank = 1;
  r.nnodes = 3;
  r.rank_offset = 4;
  r.world_size = 12;
  r.master_addr = "10.0.0.5";
  r.master_port = 29511;
  r.hosts = "node0,node1,node2";
  r.instance = "a1b2";
  return r;
}

void expect_same(const Round& a, const Round& b) {
  EXPECT_EQ(kindling::detail::encode_round(a, ' '), kindling::detail::encode_round(b, ' '));
}

TEST(RoundCodec, TheLineAndTheFileReadBackTheSameRound) {
  const Round r = sample_round();
  std::string lost;
  Round from_line;
  ASSERT_TRUE(kindling::detail::parse_round_line(kindling::detail::round_line(r, "node3 (silent 40 s)"), from_line, lost));
  expect_same(r, from_line);
  EXPECT_EQ(lost, "node3 (silent 40 s)");
  Round from_file;
  const std::string file = kindling::detail::encode_round(r, '\n');
  EXPECT_EQ(file.back(), '\n');
  EXPECT_EQ(kindling::detail::decode_round(file, from_file), "");
  expect_same(r, from_file);
  ASSERT_TRUE(kindling::detail::parse_round_line(kindling::detail::round_line(r, ""), from_line, lost));
  EXPECT_EQ(lost, "");
}

TEST(RoundCodec, AMissingOrMalformedFieldIsNamed) {
  Round r;
  EXPECT_EQ(kindling::detail::decode_round("round=1 restarts=0", r), 
            "the fields node_rank, nnodes, rank_offset, world_size, master_addr, master_port, hosts, instance are missing");
  std::string text = kindling::detail::encode_round(sample_round(), ' ');
  text.replace(text.find("world_size=12"), 13, "world_size=x");
  EXPECT_EQ(kindling::detail::decode_round(text, r), "the field world_size='x' is not a number");
  std::string lost;
  EXPECT_FALSE(kindling::detail::parse_round_line("WAITING 2", r, lost));
  EXPECT_FALSE(kindling::detail::parse_round_line("ROUND 7 2 1 3 4 12 10.0.0.5 29511 a1b2 node0", r, lost))
      << "the positional line of older versions has no names";
}

TEST(RoundCodec, AWorkerGetsTorchrunsVariables) {
  std::map<std::string, std::string> env;
  for (const auto& [name, value] : kindling::detail::round_variables(sample_round(), 2, 4)) env[name] = value;
  const std::map<std::string, std::string> expected{{"RANK", "6"},          {"LOCAL_RANK", "2"},
                                                    {"WORLD_SIZE", "12"},   {"LOCAL_WORLD_SIZE", "4"},
                                                    {"GROUP_RANK", "1"},    {"GROUP_WORLD_SIZE", "3"},
                                                    {"MASTER_ADDR", "10.0.0.5"}, {"MASTER_PORT", "29511"}};
  EXPECT_EQ(env, expected);
}

}  // namespace
