// dist_tutorial's output helpers; see tutorial.h.
#include <kindling/kindling.h>

#include <sstream>
#include <string>

#include "tutorial.h"

namespace kd = kindling::dist;

namespace dist_tutorial {

std::string fixed(double value, int digits) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(digits);
  out << value;
  return out.str();
}

void section(const std::string& title) {
  kd::barrier();
  if (kd::get_rank() == 0) say("== ", title, " ==");
  kd::barrier();
}

}  // namespace dist_tutorial
