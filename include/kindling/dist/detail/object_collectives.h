#pragma once
/// \file
/// internal: used by the templates of dist.h; not part of the API, may change.

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kindling/dist/group.h"
#include "kindling/export.h"

namespace kindling {
namespace dist {

enum class ReduceOp;  // defined in kindling/dist/dist.h

namespace detail {
KINDLING_API double all_reduce_number(double value, ReduceOp op, const Group& group);
KINDLING_API int64_t all_reduce_number(int64_t value, ReduceOp op, const Group& group);
KINDLING_API uint64_t all_reduce_number(uint64_t value, ReduceOp op, const Group& group);
/// Gathers byte strings of any length; one entry per member in group order.
KINDLING_API std::vector<std::string> all_gather_bytes(const std::string& bytes, const Group& group);
/// Broadcasts bytes from `src` (which passes them; others pass nullptr).
KINDLING_API std::string broadcast_bytes(const std::string* bytes, int src, const Group& group);
KINDLING_API bool is_serial_or_nonmember(const Group& group);
/// Global rank of the group's `index`-th member.
KINDLING_API int group_member_global_rank(const Group& group, int index);

template <typename T>
using if_number = std::enable_if_t<std::is_arithmetic<T>::value, int>;
}  // namespace detail

}  // namespace dist
}  // namespace kindling
