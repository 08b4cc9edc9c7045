// MLflowLogger without a server: misuse refused with what to do, a server that cannot be reached
// never stops training (no throw, close() bounded, everything counted as not logged, told
// once), inert on ranks other than 0. What a real server keeps is checked by
// tests/handlers/mlflow_test.py (a real `mlflow server`, read back with mlflow's client).
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <string>

#include "kindling/engine/engine.h"
#include "kindling/error.h"
#include "kindling/handlers/loggers/mlflow.h"
#include "support/errors.h"

namespace {

namespace kh = kindling::handlers;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;
using kindling::testing::error_of;

// A loopback port bound but not listening: a connection to it is refused at once, and no other
// process can take the port while this is open.
class RefusingPort {
 public:
  RefusingPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    socklen_t size = sizeof(address);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size);
    port_ = ntohs(address.sin_port);
  }
  ~RefusingPort() { ::close(fd_); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// MLflow's variables cleared for one test (a developer's shell may set them).
class NoMlflowEnvironment {
 public:
  NoMlflowEnvironment() {
    for (const char* name : kNames) {
      if (const char* value = std::getenv(name)) saved_[name] = value;
      ::unsetenv(name);
    }
  }
  ~NoMlflowEnvironment() {
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  static constexpr const char* kNames[] = {"MLFLOW_TRACKING_URI",  "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME",
                                           "MLFLOW_EXPERIMENT_ID", "RANK",          "WORLD_SIZE"};
  std::map<std::string, std::string> saved_;
};

TEST(MLflowLoggerTest, MisuseIsRefusedOnEveryRankWithWhatToDo) {
  NoMlflowEnvironment env;
  EXPECT_NE(error_of<kindling::UsageError>([] { kh::MLflowLogger logger; }).find("set MLFLOW_TRACKING_URI"),
            std::string::npos);
  const std::string local = error_of<kindling::UsageError>([] { kh::MLflowLogger logger("file:///tmp/mlruns"); });
  EXPECT_NE(local.find("'file:///tmp/mlruns' is not http:// or https://"), std::string::npos) << local;
  EXPECT_NE(local.find("run `mlflow server"), std::string::npos) << local;
  ::setenv("RANK", "1", 1);  // an inert rank refuses the same misuse
  ::setenv("WORLD_SIZE", "2", 1);
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
  NoMlflowEnvironment env;
  RefusingPort port;
  ::testing::internal::CaptureStderr();
  const auto start = std::chrono::steady_clock::now();
  {
    kh::MLflowLogger logger(port.url() + "/");
    EXPECT_TRUE(logger.active());
    EXPECT_EQ(logger.tracking_uri(), port.url());
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
  EXPECT_EQ(kindling::testing::occurrences(err, "no answer from " + port.url()), 2) << err;  // constructor, close
  EXPECT_EQ(kindling::testing::occurrences(err, "values are queued, and the run is created once the server answers"), 1)
      << err;
  EXPECT_EQ(kindling::testing::occurrences(err, "metric 'bad loss%' is not logged: it holds '%'"), 1) << err;
  EXPECT_NE(err.find("21 values and 1 artifacts were not logged to MLflow (no run was created at " + port.url()),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("'late' was logged after close()"), std::string::npos) << err;
}

}  // namespace
