// The reduction operations' names (include/kindling/dist/reduce_op.h).
#include "kindling/dist/reduce_op.h"

#include "kindling/error.h"

namespace kindling {
namespace dist {

ReduceOp reduce_op_from_string(const std::string& name) {
  if (name == "SUM") return ReduceOp::kSum;
  if (name == "PRODUCT") return ReduceOp::kProduct;
  if (name == "MIN") return ReduceOp::kMin;
  if (name == "MAX") return ReduceOp::kMax;
  if (name == "AND") return ReduceOp::kAnd;
  if (name == "OR") return ReduceOp::kOr;
  KINDLING_CHECK(false, "kindling::dist: unsupported reduction operation: '", name,
                 "'; use one of SUM, PRODUCT, MIN, MAX, AND, OR");
  return ReduceOp::kSum;
}

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "SUM";
    case ReduceOp::kProduct: return "PRODUCT";
    case ReduceOp::kMin: return "MIN";
    case ReduceOp::kMax: return "MAX";
    case ReduceOp::kAnd: return "AND";
    case ReduceOp::kOr: return "OR";
  }
  return "?";
}

}  // namespace dist
}  // namespace kindling
