// Built against an installed kindling: checks the package links and works (serial model).
#include <kindling/kindling.h>

#include <iostream>

int main() {
  const auto backends = kindling::dist::available_backends();
  const int sum = kindling::dist::all_reduce(41) + 1;
  if (backends.empty() || backends.front() != "serial" || sum != 42 || kindling::dist::get_world_size() != 1) {
    std::cerr << "consumer: unexpected result\n";
    return 1;
  }
  std::cout << "consumer: kindling " << KINDLING_VERSION_STRING << " OK, backends:";
  for (const auto& b : backends) std::cout << ' ' << b;
  std::cout << "\n";
  return 0;
}
