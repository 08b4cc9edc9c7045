#include <gtest/gtest.h>

#include "support/multiprocess.h"

int main(int argc, char** argv) {
  const int worker_rc = kindling::testing::maybe_run_worker(argc, argv);
  if (worker_rc >= 0) return worker_rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
