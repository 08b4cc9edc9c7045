// DDP's options agreement (see ddp_agreement.h).
#include "nn/ddp_agreement.h"

#include <iterator>
#include <sstream>

#include "kindling/error.h"
#include "kindling/nn/comm_hook.h"

namespace kindling {
namespace nn {
namespace detail {
namespace {

std::vector<std::string> words(const std::string& entry) {
  std::istringstream in(entry.substr(0, entry.find('\n')));
  return std::vector<std::string>(std::istream_iterator<std::string>(in), std::istream_iterator<std::string>());
}

}  // namespace

std::string options_text(const DdpOptions& o) {
  std::ostringstream text;
  text << "bucket_cap_mb=" << o.bucket_cap_mb() << " find_unused_parameters=" << o.find_unused_parameters()
       << " broadcast_buffers=" << o.broadcast_buffers() << " sync_batchnorm=" << o.sync_batchnorm()
       << " comm_hook=" << (o.comm_hook() ? o.comm_hook()->name() : std::string("none"))
       << " hierarchical_allreduce=" << o.hierarchical_allreduce();
  return text.str();
}

void check_options_agree(const std::vector<std::string>& all, const std::vector<int>& ranks) {
  const auto first = words(all.at(0));
  std::string differences;
  for (std::size_t r = 1; r < all.size(); ++r) {
    const auto mine = words(all[r]);
    for (std::size_t k = 0; k < first.size() && k < mine.size(); ++k) {
      if (mine[k] == first[k]) continue;
      differences += (differences.empty() ? "" : "; ") + std::string("rank ") + std::to_string(ranks[r]) + " has " +
                     mine[k] + " but rank " + std::to_string(ranks[0]) + " has " + first[k];
    }
  }
  KINDLING_CHECK(differences.empty(), "kindling::nn::DistributedDataParallel: the ranks were given different options (",
                 differences, "); every rank must construct DDP with the same options (the same command line)");
}

}  // namespace detail
}  // namespace nn
}  // namespace kindling
