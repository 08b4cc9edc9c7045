// MLflowLogger without a server: misuse refused with what to do, a server that cannot be reached
// never stops training (no throw, close() bounded, everything counted as not logged, told
// once), inert on ranks other than 0. What a real server keeps is checked by
// tests/handlers/mlflow_test.py (a real `mlflow server`, read back with mlflow's client).
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>

#include "kindling/engine/engine.h"
#include "kindling/error.h"
#include "kindling/handlers/loggers/mlflow.h"
#include "support/env.h"
#include "support/errors.h"
#include "support/silent_port.h"

namespace {

namespace kh = kindling::handlers;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;
using kindling::testing::error_of;

// MLflow's variables and the launcher's cleared for one test (a developer's shell may set them).
void clear_environment(kindling::testing::ScopedEnv& env) {
  for (const char* name : {"MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID",
                           "RANK", "WORLD_SIZE"}) {
    env.set(name, std::nullopt);
  }
}

TEST(MLflowLoggerTest, MisuseIsRefusedOnEveryRankWithWhatToDo) {
  kindling::testing::ScopedEnv env;
  clear_environment(env);
  EXPECT_NE(error_of<kindling::UsageError>([] { kh::MLflowLogger logger; }).find("set MLFLOW_TRACKING_URI"),
            std::string::npos);
  const std::string local = error_of<kindling::UsageError>([] { kh::MLflowLogger logger("file:///tmp/mlruns"); });
  EXPECT_NE(local.find("'file:///tmp/mlruns' is not http:// or https://"), std::string::npos) << local;
  EXPECT_NE(local.find("run `mlflow server"), std::string::npos) << local;
  env.set("RANK", "1");  // an inert rank refuses the same misuse
  env.set("WORLD_SIZE", "2");
  kh::MLflowLogger inert("http://127.0.0.1:1");
  EXPECT_FALSE(inert.active());
  const std::string key = error_of<kindling::UsageError>([&] { inert.log_params({{"learning rate!", "0.1"}}); });
  EXPECT_NE(key.find("key 'learning rate!' would be refused by MLflow: it holds '!'"), std::string::npos) << key;
  const std::string path = error_of<kindling::UsageError>([&] { inert.set_tags({{"a//b", "x"}}); });
  EXPECT_NE(path.find("not a normal path"), std::string::npos) << path;
  const std::string value = error_of<kindling::UsageError>([&] {
    inert.log_params({{"config", std::string(6001, 'x')}});
  });
  EXPECT_NE(value.find("has 6001 characters, MLflow keeps at most 6000"), std::string::npos) << value;
  inert.log_metrics({{"loss", 1.0}}, 1);  // inert: nothing sent, nothing counted
  EXPECT_TRUE(inert.flush(0.0));
  EXPECT_EQ(inert.run_id(), "");
  EXPECT_EQ(inert.not_logged(), 0);
}

TEST(MLflowLoggerTest, AServerThatCannotBeReachedNeverStopsTraining) {
  kindling::testing::ScopedEnv env;
  clear_environment(env);
  const kindling::testing::SilentPort port(/*listen=*/false);  // every connection refused at once
  const std::string url = "http://127.0.0.1:" + std::to_string(port.port());
  ::testing::internal::CaptureStderr();
  const auto start = std::chrono::steady_clock::now();
  {
    kh::MLflowLogger logger(url + "/");
    EXPECT_TRUE(logger.active());
    EXPECT_EQ(logger.tracking_uri(), url);
    EXPECT_EQ(logger.run_id(), "");  // no run: the server never answered
    logger.log_params({{"lr", "0.1"}});
    Engine trainer([](Engine& e, const Value&) { return Value(1.0 / static_cast<double>(e.state().iteration)); });
    logger.attach_output_handler(trainer, Events::ITERATION_COMPLETED, "training", {}, [](const Value& out) {
      return std::map<std::string, double>{{"loss", out.number()}};
    });
    logger.attach_output_handler(trainer, Events::ITERATION_COMPLETED, "bad", {}, [](const Value&) {
      return std::map<std::string, double>{{"loss%", 1.0}};
    });
    trainer.run(std::vector<Value>(5, Value(0.0)), 2);  // 10 iterations
    logger.log_artifact("/nonexistent/report.html");
    EXPECT_FALSE(logger.flush(0.2));  // still waiting for the server
    logger.close();
    // 10 losses + 1 parameter + 1 artifact given up at close, 10 "bad loss%" refused at once.
    EXPECT_EQ(logger.not_logged(), 22);
    logger.log_metrics({{"late", 1.0}}, 99);  // after close: dropped with a warning, no throw
    EXPECT_EQ(logger.not_logged(), 22);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_LT(seconds, 10.0) << "a refused connection is answered at once; close() gives up after one more try";
  EXPECT_EQ(kindling::testing::occurrences(err, "no answer from " + url), 2) << err;  // constructor, close
  EXPECT_EQ(kindling::testing::occurrences(err, "values are queued, and the run is created once the server answers"), 1)
      << err;
  EXPECT_EQ(kindling::testing::occurrences(err, "metric 'bad loss%' is not logged: it holds '%'"), 1) << err;
  EXPECT_NE(err.find("21 values and 1 artifacts were not logged to MLflow (no run was created at " + url),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("'late' was logged after close()"), std::string::npos) << err;
}

}  // namespace
