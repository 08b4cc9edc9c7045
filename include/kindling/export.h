#pragma once
/// \file
/// Symbol visibility for the kindling shared library.
#if defined(_WIN32)
#define KINDLING_API
#else
#define KINDLING_API __attribute__((visibility("default")))
#endif
