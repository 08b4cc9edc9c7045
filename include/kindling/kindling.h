#pragma once
/// \file
/// Umbrella header: everything of kindling's public API.
#include "kindling/config.h"
#include "kindling/dist/dist.h"
#include "kindling/dist/launch_env.h"
#include "kindling/dist/parallel.h"
#include "kindling/error.h"
#include "kindling/log.h"
