// kindling-run --rdzv_backend etcd on one machine, against a real etcd (Debian's etcd-server)
// started by each test on free loopback ports and removed with its data when the test ends: a
// job of two agents, the serving agent killed (the other one takes over from the state in
// etcd), and members that do not answer. Across hosts: tests/cluster/etcd_test.py.
#include <gtest/gtest.h>

#include <string>

#include "support/multiprocess.h"
#include "support/silent_port.h"

namespace {

using kindling::testing::run_command;

const std::string kRunEtcd = KINDLING_RUN_PATH;

std::string show_all(const kindling::testing::RankResult& r) {
  return "exit " + std::to_string(r.exit_code) + " after " + std::to_string(r.seconds) + " s\nstdout:\n" + r.out +
         "\nstderr:\n" + r.err;
}

// A shell script that starts a one-member etcd cluster on free loopback ports ($ETCD is its
// client address), waits until it is healthy, runs `body`, prints "keys left: N" (the keys
// kindling-run left in etcd), and removes the member and its data on every way out.
std::string with_etcd(const std::string& body) {
  const std::string client = "127.0.0.1:" + std::to_string(kindling::testing::free_port());
  const std::string peer = "http://127.0.0.1:" + std::to_string(kindling::testing::free_port());
  const std::string py = KINDLING_PYTHON;
  // TMPDIR: what a killed agent leaves (its error and live folders) goes with $d.
  return "set -u; d=$(mktemp -d); export TMPDIR=$d; ETCD=" + client +
         "; etcd --data-dir $d/data --listen-client-urls http://$ETCD --advertise-client-urls http://$ETCD "
         "--listen-peer-urls " +
         peer + " --initial-advertise-peer-urls " + peer + " --initial-cluster default=" + peer +
         " > $d/log 2>&1 & e=$!; trap 'kill -9 $e; wait $e; rm -rf $d' EXIT; " + py +
         " -c \"import time, urllib.request\nfor _ in range(100):\n  try:\n"
         "    urllib.request.urlopen('http://$ETCD/health', timeout=1); break\n"
         "  except Exception: time.sleep(0.1)\" || exit 9; " +
         body + "; " + py +
         " -c \"import json, urllib.request\nr = urllib.request.Request('http://$ETCD/v3/kv/range', "
         "data=b'{\\\"key\\\": \\\"Lw==\\\", \\\"range_end\\\": \\\"MA==\\\"}')\n"
         "print('keys left:', json.load(urllib.request.urlopen(r)).get('count', 0))\"";
}

}  // namespace

TEST(KindlingRunEtcd, TwoAgentsFormOneJobAndLeaveNoKeys) {
  const std::string agent =
      kRunEtcd + " --nnodes 2 --rdzv_backend etcd --rdzv_endpoint $ETCD --rdzv_id etcd-two --nproc_per_node 2 " +
      HELLO_DIST_PATH;
  const auto r = run_command(
      {"/bin/sh", "-c", with_etcd(agent + " & a=$!; " + agent + " & b=$!; wait $a; ea=$?; wait $b; echo exit=$ea,$?")},
      {}, std::chrono::seconds(60));
  EXPECT_NE(r.out.find("exit=0,0"), std::string::npos) << show_all(r);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.out.find("rank=" + std::to_string(rank) + " local_rank=" + std::to_string(rank % 2) +
                         " world_size=4 backend=gloo all_reduce=10"),
              std::string::npos)
        << show_all(r);
  }
  EXPECT_NE(r.err.find("serving the rendezvous at "), std::string::npos) << show_all(r);
  EXPECT_NE(r.out.find("keys left: 0"), std::string::npos) << "a job that completed left its keys\n" << show_all(r);
}

// Agent A serves (it starts first); both run a worker that sleeps in the first attempt. A is
// killed with SIGKILL (its worker goes with it). B takes over once A's lease (5 s) has expired,
// from round 0 in etcd; A does not come back within the grace (5 s), so B stops its worker
// and the job goes on at 1 node as restart 1, where the worker exits 0.
TEST(KindlingRunEtcd, TheServingAgentKilledIsReplacedFromTheStateInEtcd) {
  const std::string agent =
      kRunEtcd +
      " --nnodes 1:2 --rdzv_backend etcd --rdzv_endpoint $ETCD --rdzv_id etcd-kill --max_restarts 1 "
      "--rdzv_conf last_call_timeout=1 --grace_period 1 /bin/sh -c \"$W\"";
  // Each wait is bounded (30 s), so that the script always reaches its clean-up.
  const auto wait_for = [](const std::string& text, const std::string& file) {
    return "for i in $(seq 300); do grep -q '" + text + "' " + file + " 2>/dev/null && break; sleep 0.1; done; ";
  };
  const std::string body =
      "W='echo worker restart $TORCHELASTIC_RESTART_COUNT world $WORLD_SIZE; "
      "if [ $TORCHELASTIC_RESTART_COUNT = 1 ]; then exit 0; fi; sleep 60'; export W; " +
      agent + " > $d/a.out 2> $d/a.err & a=$!; " + wait_for("serving the rendezvous", "$d/a.err") + agent +
      " > $d/b.out 2> $d/b.err & b=$!; " + wait_for("worker restart 0", "$d/a.out") +
      wait_for("worker restart 0", "$d/b.out") +
      "kill -9 $a; wait $b; echo exit_b=$?; cat $d/a.out $d/b.out; "
      "cat $d/a.err $d/b.err >&2";
  const auto r = run_command({"/bin/sh", "-c", with_etcd(body)}, {}, std::chrono::seconds(90));
  EXPECT_NE(r.out.find("exit_b=0"), std::string::npos) << show_all(r);
  EXPECT_NE(r.out.find("worker restart 0 world 2"), std::string::npos) << show_all(r);
  EXPECT_NE(r.out.find("worker restart 1 world 1"), std::string::npos) << show_all(r);
  EXPECT_NE(r.err.find("from round 0 of the agent it replaces"), std::string::npos) << show_all(r);
  EXPECT_NE(r.err.find("rendezvous round 1 (restart 1): 1 node"), std::string::npos) << show_all(r);
  EXPECT_NE(r.err.find("a node of the running round was lost ("), std::string::npos) << show_all(r);
  EXPECT_NE(r.err.find(" (127.0.0.1): its agent was lost"), std::string::npos) << show_all(r);
  EXPECT_NE(r.out.find("keys left: 0"), std::string::npos) << show_all(r);
}

TEST(KindlingRunEtcd, MembersThatDoNotAnswerAreNamed) {
  const std::string one = "127.0.0.1:" + std::to_string(kindling::testing::free_port());
  const std::string two = "localhost:" + std::to_string(kindling::testing::free_port());
  const auto r = run_command({kRunEtcd, "--nnodes", "1:2", "--rdzv_backend", "etcd", "--rdzv_endpoint", one + "," + two,
                              "--rdzv_id", "nobody", "--rdzv_conf", "join_timeout=3", "/bin/true"},
                             {}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 1) << show_all(r);
  EXPECT_LT(r.seconds, 15.0) << show_all(r);
  EXPECT_NE(r.err.find("no etcd member answered (" + one + ": Couldn't connect to server; " + two), std::string::npos)
      << show_all(r);
  EXPECT_NE(r.err.find("Start the etcd cluster (or check the members given to --rdzv_endpoint)"), std::string::npos)
      << show_all(r);
}

// Endpoints that are not etcd members, refused instead of waited for until the join timeout
// (90 s here): an HTTP server answering 501 to everything and a kindling-run rendezvous of
// --rdzv_backend c10d (the nodes were given different backends) at once, by what they answer
// to etcd's GET /version; a listener that never answers after 30 s of silence (an etcd member
// waiting for the other members of its cluster is silent too, so it is not refused at once).
TEST(KindlingRunEtcd, AnEndpointThatIsNotEtcdIsRefused) {
  const std::string http = std::to_string(kindling::testing::free_port());
  const std::string c10d = std::to_string(kindling::testing::free_port());
  const std::string py = KINDLING_PYTHON;
  const std::string agent = kRunEtcd + " --nnodes 2 --rdzv_backend etcd --rdzv_id stranger "
                                       "--rdzv_conf join_timeout=90 --rdzv_endpoint 127.0.0.1:";
  const std::string script =
      py + " -c 'import http.server as h; h.HTTPServer((\"127.0.0.1\", " + http +
      "), h.BaseHTTPRequestHandler).serve_forever()' 2>/dev/null & s=$!; " + kRunEtcd +
      " --nnodes 2 --rdzv_endpoint 127.0.0.1:" + c10d +
      " --rdzv_id stranger --rdzv_conf join_timeout=90 /bin/true 2>/dev/null & c=$!; sleep 1; "
      "t=$(date +%s); " + agent + http + " /bin/true; echo http_exit=$? after $(($(date +%s) - t)) s; t=$(date +%s); " + agent +
      c10d + " /bin/true; echo c10d_exit=$? after $(($(date +%s) - t)) s; kill $s $c";
  const auto r = run_command({"/bin/sh", "-c", script}, {}, std::chrono::seconds(60));
  EXPECT_NE(r.out.find("http_exit=1 after 0 s"), std::string::npos) << show_all(r);
  EXPECT_NE(r.out.find("c10d_exit=1 after 0 s"), std::string::npos) << show_all(r);
  EXPECT_NE(r.err.find("--rdzv_backend etcd: not an etcd member: 127.0.0.1:" + http +
                       " answered HTTP 501 ('<!DOCTYPE HTML>') to GET /version, which an etcd member answers with "
                       "its version; give --rdzv_endpoint the client address of each etcd member"),
            std::string::npos)
      << show_all(r);
  EXPECT_NE(r.err.find("127.0.0.1:" + c10d +
                       " is a kindling-run rendezvous of --rdzv_backend c10d (it greeted 'KINDLING-RENDEZVOUS 1'): the "
                       "nodes were given different --rdzv_backend; give every node the same --rdzv_backend"),
            std::string::npos)
      << show_all(r);

  const kindling::testing::SilentPort silent;
  const std::string member = "127.0.0.1:" + std::to_string(silent.port());
  const auto s = run_command({kRunEtcd, "--nnodes", "1:2", "--rdzv_backend", "etcd", "--rdzv_endpoint", member,
                              "--rdzv_id", "silent", "--rdzv_conf", "join_timeout=90", "/bin/true"},
                             {}, std::chrono::seconds(100));
  EXPECT_EQ(s.exit_code, 1) << show_all(s);
  EXPECT_LT(s.seconds, 60.0) << show_all(s);
  EXPECT_NE(s.err.find(member + " accepted connections but answered nothing to etcd's GET /version for 30 s: not an "
                                "etcd member (check the ports given to --rdzv_endpoint"),
            std::string::npos)
      << show_all(s);
}
