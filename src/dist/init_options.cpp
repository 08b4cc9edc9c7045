// One check of InitOptions for every entry point (init_options.h).
#include "dist/init_options.h"

#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace detail {

void check_init_options(const BackendTraits& traits, const InitOptions& options, const std::string& caller) {
  KINDLING_CHECK(options.timeout().count() > 0, caller, ": timeout must be positive, got ", options.timeout().count(),
                 " ms");
  KINDLING_CHECK(!options.stall_timeout() || options.stall_timeout()->count() >= 0, caller,
                 ": stall_timeout must not be negative (0 turns stall detection off), got ",
                 options.stall_timeout() ? options.stall_timeout()->count() : 0, " ms");
  const std::string& m = options.init_method();
  KINDLING_CHECK(m.rfind("env://", 0) == 0 || m.rfind("tcp://", 0) == 0 || m.rfind("file://", 0) == 0, caller,
                 ": unsupported init_method '", m, "'; use 'env://', 'tcp://host:port' or 'file:///path'");
  KINDLING_CHECK(traits.own_launcher.empty() || m.rfind("env://", 0) == 0, caller, "(\"", traits.name,
                 "\"): init_method '", m, "' does not apply: ", traits.own_launcher,
                 " connects the ranks; leave it at env://");
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
