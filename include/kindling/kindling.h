#pragma once
/// \file
/// Umbrella header: everything of kindling's public API.
#include "kindling/config.h"
#include "kindling/dist/dist.h"
#include "kindling/error.h"
