// The tutorial's `training(local_rank, config)`: run on every rank by Parallel.
#pragma once

#include "config.h"

namespace cifar10 {

/// Trains and evaluates as the tutorial does (see training.cpp). Every rank calls it.
/// Throws kindling::Error (or a LibTorch error) on failure, after logging it on rank 0.
void training(int local_rank, Config config);

}  // namespace cifar10
