#pragma once
/// \file
/// Umbrella header: every public header of kindling. Start here:
/// - kindling/dist/dist.h      initialize / finalize, ranks, device(), collectives, groups
/// - kindling/dist/auto.h      auto_model, auto_optim, auto_dataloader
/// - kindling/dist/parallel.h  Parallel: start or join a distributed run from main()
/// - kindling/nn/ddp.h         DistributedDataParallel (what auto_model returns)
/// - kindling/nn/comm_hook.h   its communication hooks (fp16 / bf16 compression); powersgd.h
/// - kindling/data/*.h         datasets, transforms, samplers, DataLoader
/// - kindling/log.h, error.h   the log and the exceptions kindling throws
/// Narrower includes compile faster; this one pulls in LibTorch's nn and c10d headers.
#include "kindling/config.h"
#include "kindling/data/dataset.h"
#include "kindling/data/datasets.h"
#include "kindling/data/loader.h"
#include "kindling/data/sampler.h"
#include "kindling/data/transforms.h"
#include "kindling/dist/auto.h"
#include "kindling/dist/c10d.h"
#include "kindling/dist/dist.h"
#include "kindling/dist/group.h"
#include "kindling/dist/hierarchy.h"
#include "kindling/dist/launch_env.h"
#include "kindling/dist/parallel.h"
#include "kindling/dist/serialize.h"
#include "kindling/engine/amp.h"
#include "kindling/engine/engine.h"
#include "kindling/engine/state_dict.h"
#include "kindling/engine/supervised.h"
#include "kindling/error.h"
#include "kindling/handlers/checkpointing/checkpoint.h"
#include "kindling/handlers/checkpointing/disk_saver.h"
#include "kindling/handlers/checkpointing/run_folder.h"
#include "kindling/handlers/checkpointing/stateful.h"
#include "kindling/handlers/common.h"
#include "kindling/handlers/ema_handler.h"
#include "kindling/handlers/loggers/html_report.h"
#include "kindling/handlers/loggers/json_logger.h"
#include "kindling/handlers/loggers/progress_bar.h"
#include "kindling/handlers/loggers/setup_logger.h"
#include "kindling/handlers/loggers/tensorboard.h"
#include "kindling/handlers/profilers/handlers_time_profiler.h"
#include "kindling/handlers/profilers/time_profiler.h"
#include "kindling/handlers/profilers/timer.h"
#include "kindling/handlers/schedulers/lr_finder.h"
#include "kindling/handlers/schedulers/param_scheduler.h"
#include "kindling/handlers/schedulers/reduce_lr_on_plateau.h"
#include "kindling/handlers/stopping.h"
#include "kindling/handlers/time_limit.h"
#include "kindling/log.h"
#include "kindling/metrics/metrics.h"
#include "kindling/models/resnet.h"
#include "kindling/nn/batchnorm.h"
#include "kindling/nn/comm_hook.h"
#include "kindling/nn/ddp.h"
#include "kindling/nn/join.h"
#include "kindling/nn/optimizer_state.h"
#include "kindling/nn/powersgd.h"
#include "kindling/nn/zero.h"
