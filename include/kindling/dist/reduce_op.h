#pragma once
/// \file
/// The reduction operations of kindling::dist's collectives (all_reduce, reduce, and the DDP
/// hooks), with idist's names for them. Included by <kindling/dist/dist.h>.
#include <string>

#include "kindling/export.h"

namespace kindling {
namespace dist {

/// Reduction operations. kAnd / kOr are bitwise and need integral or bool tensors.
enum class ReduceOp { kSum, kProduct, kMin, kMax, kAnd, kOr };

/// Parses "SUM", "PRODUCT", "MIN", "MAX", "AND", "OR" (idist's spellings). Any rank may call it;
/// no communication. Throws kindling::UsageError for another name, listing the accepted ones.
KINDLING_API ReduceOp reduce_op_from_string(const std::string& name);
/// The idist spelling of `op` ("SUM", ...); "?" for a value outside the enum. Throws nothing.
KINDLING_API const char* to_string(ReduceOp op);

}  // namespace dist
}  // namespace kindling
