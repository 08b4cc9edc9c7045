// TensorboardLogger: an engine's outputs, metrics and optimizer parameters written to a real
// event file and read back by an independent reader (tests/handlers/read_tfevents.py: its own
// CRC32C, Python's protobuf runtime), every tag, step and value compared; the file's name and
// directory; values after close() dropped with one warning; errors; global_step_from_engine;
// only rank 0 writing (TensorBoard and JSON).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/optim/sgd.h>

#include <dirent.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "support/files.h"
#include "support/errors.h"
#include "kindling/dist/dist.h"
#include "kindling/engine/engine.h"
#include "kindling/handlers/loggers/json_logger.h"
#include "kindling/handlers/loggers/tensorboard.h"
#include "support/multiprocess.h"

namespace {

namespace kd = kindling::dist;
namespace kh = kindling::handlers;
using kindling::engine::Engine;
using kindling::engine::Event;
using kindling::engine::EventCounter;
using kindling::engine::Events;
using kindling::engine::Value;
using Scalars = std::map<std::string, double>;

void remove_tree(const std::string& dir) { std::system(("rm -rf '" + dir + "'").c_str()); }

std::vector<std::string> lines_in_file(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

using kindling::testing::error_of;

struct Scalar {
  std::string tag;
  int64_t step;
  double value;
};

// What read_tfevents.py found in an event file.
struct EventFile {
  std::string version;
  double version_time = 0;
  std::vector<Scalar> scalars;
  std::vector<double> times;
};

// The rest of a reader's "SCALAR <step> <value> <wall_time> <tag>" line after its first word.
Scalar scalar_line(std::istringstream& in, double& wall_time) {
  Scalar s;
  std::string value, time;
  in >> s.step >> value >> time;
  in.get();  // the space before the tag, which is the rest of the line
  std::getline(in, s.tag);
  s.value = std::stod(value);
  wall_time = std::stod(time);
  return s;
}

EventFile read_with_python(const std::string& path) {
  const auto r =
      kindling::testing::run_command({KINDLING_PYTHON, KINDLING_SOURCE_DIR "/tests/handlers/read_tfevents.py", path});
  EXPECT_TRUE(r.ok()) << kindling::testing::describe({r});
  EventFile file;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::string kind, time;
    in >> kind;
    if (kind == "VERSION") {
      in >> time >> file.version;
      file.version_time = std::stod(time);
    } else if (kind == "SCALAR") {
      double wall_time = 0;
      file.scalars.push_back(scalar_line(in, wall_time));
      file.times.push_back(wall_time);
    } else {
      ADD_FAILURE() << "unexpected line from read_tfevents.py: " << line;
    }
  }
  return file;
}

TEST(TensorboardLoggerTest, EveryScalarReadsBackInPythonWithItsTagAndStep) {
  const kindling::testing::TempDir folder("tb");
  const std::string dir = folder.path(),
                    log_dir = dir + "/runs/exp1";  // runs/exp1 does not exist yet
  const double before = kindling::testing::unix_now();
  std::string file_path;
  {
    kh::TensorboardLogger tb(log_dir);
    ASSERT_TRUE(tb.active());
    Engine trainer([](Engine& e, const int& b) -> Value { return b * 0.5 + static_cast<double>(e.state().epoch); });
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(std::vector<at::Tensor>{at::zeros({2})},
                        std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.1).momentum(0.9)));
    groups.emplace_back(std::vector<at::Tensor>{at::zeros({3})},
                        std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.01).momentum(0.5)));
    torch::optim::SGD opt(groups, torch::optim::SGDOptions(0.1));
    trainer.on(Events::EPOCH_COMPLETED, [](Engine& e) {  // the "metrics", before the handlers reading them
      const double epoch = static_cast<double>(e.state().epoch);
      e.state().metrics["accuracy"] = 0.25 * epoch;
      e.state().metrics["per_class"] = at::tensor({1.5, 2.5}) * epoch;
      e.state().metrics["confusion"] = at::ones({2, 2});  // 2 dimensions: skipped with a warning, as ignite
    });
    tb.attach_output_handler(trainer, Events::ITERATION_COMPLETED, "training", {}, [](const Value& out) {
      return Scalars{{"loss", out.number()}};
    });
    tb.attach_output_handler(trainer, Events::EPOCH_COMPLETED, "validation",
                             {"accuracy", "per_class", "confusion", "missing"});
    tb.attach_opt_params_handler(trainer, Events::ITERATION_STARTED, opt, "lr", std::string("optim"));
    tb.attach_opt_params_handler(trainer, Events::EPOCH_STARTED, opt, "momentum");
    trainer.on(Events::ITERATION_COMPLETED, [&opt](Engine&) {
      for (auto& group : opt.param_groups()) group.options().set_lr(group.options().get_lr() * 0.5);
    });
    Engine evaluator([](Engine&, const int& b) -> Value { return b; });
    evaluator.on(Events::COMPLETED,
                 [&trainer](Engine& e) { e.state().metrics["score"] = 100.0 + trainer.state().epoch; });
    tb.attach_output_handler(evaluator, Events::COMPLETED, "eval", {"score"}, {}, kh::global_step_from_engine(trainer));
    std::vector<int> eval_data{10, 20};
    trainer.on(Events::EPOCH_COMPLETED, [&](Engine&) { evaluator.run(eval_data, 1); });
    std::vector<int> data{1, 2, 3};
    trainer.run(data, 2);
    tb.add_scalar("direct/value", 3.25, 42);
    tb.add_scalar("direct/negative step", -1.5, -7);
    file_path = tb.file_path();
    tb.close();
    // After close(): dropped (the records below are compared one for one) with one warning.
    ::testing::internal::CaptureStderr();
    tb.add_scalar("after/close", 1.0, 1);
    tb.add_scalar("after/close", 2.0, 2);
    tb.add_histogram("after/histogram", at::ones({3}), 3);
    trainer.run(data, 3);  // the handlers still attached write nothing either
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(kindling::testing::occurrences(err, "was logged after close()"), 1) << err;
    EXPECT_NE(err.find("TensorboardLogger: 'after/close' was logged after close() (or after the logger was destroyed) "
                       "and is dropped"),
              std::string::npos)
        << err;
  }
  const double after = kindling::testing::unix_now();

  // The expected records, in the order the events fire and the handlers were attached.
  std::vector<Scalar> expected;
  int64_t iteration = 0;
  for (int64_t epoch = 1; epoch <= 2; ++epoch) {
    expected.push_back({"momentum/group_0", epoch, 0.9});
    expected.push_back({"momentum/group_1", epoch, 0.5});
    for (int b : {1, 2, 3}) {
      ++iteration;
      const double halvings = std::pow(0.5, static_cast<double>(iteration - 1));
      expected.push_back({"optim/lr/group_0", iteration, 0.1 * halvings});
      expected.push_back({"optim/lr/group_1", iteration, 0.01 * halvings});
      expected.push_back({"training/loss", iteration, b * 0.5 + static_cast<double>(epoch)});
    }
    expected.push_back({"validation/accuracy", epoch, 0.25 * static_cast<double>(epoch)});
    expected.push_back({"validation/per_class/0", epoch, 1.5 * static_cast<double>(epoch)});
    expected.push_back({"validation/per_class/1", epoch, 2.5 * static_cast<double>(epoch)});
    expected.push_back({"eval/score", epoch, 100.0 + static_cast<double>(epoch)});  // the trainer's epoch
  }
  expected.push_back({"direct/value", 42, 3.25});
  expected.push_back({"direct/negative step", -7, -1.5});

  const std::vector<std::string> files = kindling::testing::files_in(log_dir);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(file_path, log_dir + "/" + files[0]);
  const std::string prefix = "events.out.tfevents.", suffix = "." + kd::hostname();
  ASSERT_EQ(files[0].compare(0, prefix.size(), prefix), 0) << files[0];
  ASSERT_GT(files[0].size(), prefix.size() + suffix.size()) << files[0];
  ASSERT_EQ(files[0].substr(files[0].size() - suffix.size()), suffix) << files[0];
  const int64_t seconds = std::stoll(files[0].substr(prefix.size(), files[0].size() - prefix.size() - suffix.size()));
  EXPECT_GE(seconds, static_cast<int64_t>(before));
  EXPECT_LE(seconds, static_cast<int64_t>(after));

  const EventFile file = read_with_python(file_path);
  EXPECT_EQ(file.version, "brain.Event:2");
  EXPECT_GE(file.version_time, before - 1e-3);
  ASSERT_EQ(file.scalars.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(file.scalars[i].tag, expected[i].tag) << "record " << i + 1;
    EXPECT_EQ(file.scalars[i].step, expected[i].step) << expected[i].tag;
    EXPECT_EQ(static_cast<float>(file.scalars[i].value), static_cast<float>(expected[i].value)) << expected[i].tag;
    EXPECT_GE(file.times[i], i == 0 ? file.version_time : file.times[i - 1]) << expected[i].tag;
    EXPECT_LE(file.times[i], after + 1e-3) << expected[i].tag;
  }

  // TensorBoard's own reader (EventAccumulator) finds the same scalars, tag by tag in the same
  // order, from the Python with tensorboard beside this build's torch (scripts/python-peer.sh).
  const auto peer = kindling::testing::run_command({KINDLING_SOURCE_DIR "/scripts/python-peer.sh", KINDLING_PYTHON});
  ASSERT_TRUE(peer.ok()) << kindling::testing::describe({peer});
  const std::string python = peer.out.substr(0, peer.out.find('\n'));
  const auto tb_read = kindling::testing::run_command(
      {python, KINDLING_SOURCE_DIR "/tests/handlers/read_tfevents_tensorboard.py", file_path});
  ASSERT_TRUE(tb_read.ok()) << kindling::testing::describe({tb_read});
  std::map<std::string, std::vector<Scalar>> by_tag, tb_by_tag;
  for (const auto& s : expected) by_tag[s.tag].push_back(s);
  std::istringstream lines(tb_read.out);
  std::string file_version;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "FILE_VERSION") {
      in >> file_version;
      continue;
    }
    ASSERT_EQ(kind, "SCALAR") << line;
    double wall_time = 0;
    const Scalar s = scalar_line(in, wall_time);
    tb_by_tag[s.tag].push_back(s);
  }
  ASSERT_FALSE(file_version.empty()) << tb_read.out;
  EXPECT_EQ(std::stod(file_version), 2.0) << "TensorBoard read file_version " << file_version;  // "brain.Event:2"
  ASSERT_EQ(tb_by_tag.size(), by_tag.size()) << tb_read.out;
  for (const auto& [tag, want] : by_tag) {
    const auto& got = tb_by_tag[tag];
    ASSERT_EQ(got.size(), want.size()) << tag;
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].step, want[i].step) << tag;
      EXPECT_EQ(static_cast<float>(got[i].value), static_cast<float>(want[i].value)) << tag;
    }
  }
  remove_tree(dir);
}

TEST(TensorboardLoggerTest, ErrorsSayWhatToDo) {
  const kindling::testing::TempDir dir_folder("tb");
  const std::string dir = dir_folder.path();
  EXPECT_NE(error_of([] { kh::TensorboardLogger tb(""); }).find("log_dir is an empty string"), std::string::npos);
  std::ofstream(dir + "/plain") << "a file";
  EXPECT_NE(error_of([&] { kh::TensorboardLogger tb(dir + "/plain/sub"); }).find("exists and is not a directory"),
            std::string::npos);
  kh::TensorboardLogger tb(dir);
  kh::TensorboardLogger second(dir);  // same directory, very likely the same second: its own file
  EXPECT_EQ(kindling::testing::files_in(dir).size(), 3u);
  EXPECT_NE(tb.file_path(), second.file_path());
  Engine engine([](Engine&, const int& b) -> Value { return b; });
  EXPECT_NE(error_of([&] { tb.attach_output_handler(engine, Events::EPOCH_COMPLETED, "t"); }).find("nothing to log"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              tb.attach_output_handler(engine, Events::TERMINATE, "t", {"a"});
            }).find("TERMINATE has no counter"),
            std::string::npos);
  tb.attach_output_handler(engine, Events::TERMINATE, "t", {"a"}, {}, [](Engine&, const Event&) { return 0; });
  torch::optim::SGD opt(std::vector<at::Tensor>{at::zeros({2})}, torch::optim::SGDOptions(0.1));
  const std::string betas =
      error_of([&] { tb.attach_opt_params_handler(engine, Events::EPOCH_STARTED, opt, "betas"); });
  EXPECT_NE(betas.find("parameter group 0 of the optimizer has no number named 'betas'"), std::string::npos) << betas;
  EXPECT_NE(error_of([&] { tb.add_scalar("bad \xff tag", 1.0, 1); }).find("not valid UTF-8"), std::string::npos);
  EXPECT_THROW(kh::global_step_from_engine(engine, std::nullopt, EventCounter::kNone), kindling::UsageError);
  remove_tree(dir);
}

// A name known only at the event (an output's) that is not UTF-8 is dropped with one warning
// on rank 0 rather than thrown there alone; names given at attach are checked on every rank.
TEST(TensorboardLoggerTest, NamesThatAreNotUtf8AreRefusedAtAttachAndDroppedAtTheEvent) {
  kindling::testing::TempDir dir("tb_utf8");
  std::string path;
  {
    kh::TensorboardLogger tb(dir.path());
    path = tb.file_path();
    Engine engine([](Engine&, const int& b) -> Value { return b; });
    EXPECT_NE(error_of([&] {
                tb.attach_output_handler(engine, Events::EPOCH_COMPLETED, "t", {"bad \xff"});
              }).find("'bad \xff' is not valid UTF-8"),
              std::string::npos);
    tb.attach_output_handler(engine, Events::ITERATION_COMPLETED, "t", {}, [](const Value& out) {
      return Scalars{{"good", out.number()}, {"bad \xff", 1.0}};
    });
    ::testing::internal::CaptureStderr();
    engine.run(std::vector<int>{1, 2, 3}, 1);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(kindling::testing::occurrences(err, "is not valid UTF-8"), 1) << err;
  }
  const EventFile file = read_with_python(path);
  ASSERT_EQ(file.scalars.size(), 3u);
  for (const auto& s : file.scalars) EXPECT_EQ(s.tag, "t/good");
}

TEST(GlobalStepFromEngineTest, TheOtherEnginesCounterForTheEventFired) {
  Engine trainer([](Engine&, const int& b) -> Value { return b; });
  const Event backward_done = Event::custom("BACKWARD_DONE");
  trainer.register_events({backward_done});
  trainer.on(Events::ITERATION_COMPLETED.every(2), [&](Engine& e) { e.fire_event(backward_done); });
  std::vector<int> data{1, 2, 3};
  trainer.run(data, 2);  // iteration 6, epoch 2, BACKWARD_DONE fired 3 times
  Engine evaluator([](Engine&, const int& b) -> Value { return b; });
  const kh::GlobalStepTransform step = kh::global_step_from_engine(trainer);
  EXPECT_EQ(step(evaluator, Events::ITERATION_COMPLETED), 6);
  EXPECT_EQ(step(evaluator, Events::ITERATION_STARTED.every(5)), 6);
  EXPECT_EQ(step(evaluator, Events::GET_BATCH_COMPLETED), 6);
  EXPECT_EQ(step(evaluator, Events::EPOCH_COMPLETED), 2);
  EXPECT_EQ(step(evaluator, Events::STARTED), 2);
  EXPECT_EQ(step(evaluator, Events::COMPLETED), 2);
  EXPECT_EQ(step(evaluator, backward_done), 3);
  EXPECT_EQ(step(evaluator, Events::TERMINATE), 2);                // no counter: the fallback, epoch
  EXPECT_EQ(step(evaluator, Event::custom("NOT_REGISTERED")), 2);  // not registered with the trainer: epoch
  EXPECT_EQ(kh::global_step_from_engine(trainer, std::nullopt, EventCounter::kIteration)(evaluator, Events::TERMINATE),
            6);
  EXPECT_EQ(kh::global_step_from_engine(trainer, Events::ITERATION_COMPLETED)(evaluator, Events::EPOCH_COMPLETED), 6);
}

// Every rank constructs the loggers and attaches the same handlers; only rank 0 makes
// directories and files, and the other ranks' handlers do not even call the transforms.
KINDLING_WORKER(tensorboard_rank0_writes) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(60)));
  const int rank = kd::get_rank();
  const std::string dir = std::getenv("KINDLING_TEST_DIR"), r = std::to_string(rank);
  {
    kh::TensorboardLogger tb(dir + "/tb_rank" + r);
    kh::JsonLogger json(dir + "/json_rank" + r + "/scalars.jsonl");
    kh::JsonLogger shared(dir + "/shared.jsonl");
    WCHECK(tb.active() == (rank == 0) && json.active() == (rank == 0), << "rank " << rank);
    WCHECK(tb.file_path().empty() == (rank != 0), << tb.file_path());
    Engine trainer([rank](Engine&, const int& b) -> Value { return 100.0 * rank + b; });
    int transform_calls = 0;
    const kh::OutputScalarsTransform output = [&](const Value& out) {
      ++transform_calls;
      return Scalars{{"out", out.number()}};
    };
    tb.attach_output_handler(trainer, Events::ITERATION_COMPLETED, "train", {}, output);
    json.attach_output_handler(trainer, Events::ITERATION_COMPLETED, "train", {}, output);
    shared.attach_output_handler(trainer, Events::ITERATION_COMPLETED, "train", {}, output);
    std::vector<int> data{1, 2};
    trainer.run(data, 1);
    tb.add_scalar("direct", 1.0, 1);
    shared.add_scalar("", "direct", 1.0, 1);
    WCHECK(transform_calls == (rank == 0 ? 6 : 0), << "rank " << rank << ": " << transform_calls << " calls");
  }
  kd::finalize();
}

TEST(TensorboardLoggerTest, OnlyRankZeroCreatesAndWritesFiles) {
  const kindling::testing::TempDir dir_folder("tb");
  const std::string dir = dir_folder.path();
  kindling::testing::LaunchOptions opts;
  opts.world_size = 2;
  opts.env["KINDLING_TEST_DIR"] = dir;
  const auto results = kindling::testing::run_workers("tensorboard_rank0_writes", opts);
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << kindling::testing::describe(results);
  EXPECT_EQ(kindling::testing::files_in(dir), (std::vector<std::string>{"json_rank0", "shared.jsonl", "tb_rank0"}));
  const std::vector<std::string> event_files = kindling::testing::files_in(dir + "/tb_rank0");
  ASSERT_EQ(event_files.size(), 1u);
  EXPECT_EQ(read_with_python(dir + "/tb_rank0/" + event_files[0]).scalars.size(), 3u);
  const std::vector<std::string> shared = lines_in_file(dir + "/shared.jsonl");
  ASSERT_EQ(shared.size(), 3u);
  EXPECT_NE(shared[0].find("\"value\":1,"), std::string::npos) << shared[0];  // rank 0's outputs: 1, 2
  EXPECT_NE(shared[1].find("\"value\":2,"), std::string::npos) << shared[1];
  EXPECT_EQ(lines_in_file(dir + "/json_rank0/scalars.jsonl").size(), 2u);
  remove_tree(dir);
}

}  // namespace
