# The gloo backend (LibTorch c10d's ProcessGroupGloo). Included by the root CMakeLists.txt (its
# scope: no variables to pass up) once the kindling target exists, when KINDLING_WITH_GLOO is on.
# In: the kindling target, KINDLING_C10D_DEFINITIONS. Out: KINDLING_C10D_DEFINITIONS gains
# USE_C10D_GLOO; KINDLING_GLOO_REDUCES_BF16 (for c10d/gloo_types.h.in).

# c10d's ProcessGroupGloo.hpp includes Gloo's own headers: Debian ships them in libgloo-dev; pip's
# LibTorch ships none (point KINDLING_GLOO_INCLUDE_DIR at a copy).
find_path(KINDLING_GLOO_INCLUDE_DIR gloo/algorithm.h HINTS ${TORCH_INSTALL_PREFIX}/include)
if(NOT KINDLING_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR "KINDLING_WITH_GLOO is ON but Gloo's headers (gloo/algorithm.h) were not found: install "
    "libgloo-dev, or pass -DKINDLING_GLOO_INCLUDE_DIR=<dir holding gloo/>, or configure with -DKINDLING_WITH_GLOO=OFF")
endif()
target_include_directories(kindling SYSTEM PRIVATE ${KINDLING_GLOO_INCLUDE_DIR})
# The tests, examples and benchmarks, added below the root later, include it too (interop with a
# user's ProcessGroupGloo).
include_directories(SYSTEM ${KINDLING_GLOO_INCLUDE_DIR})
target_sources(kindling PRIVATE ${CMAKE_CURRENT_LIST_DIR}/gloo_backend.cpp)
# c10d's ProcessGroupGloo.hpp is empty without USE_C10D_GLOO; Debian's torch target sets it, pip's
# LibTorch 2.x does not.
list(APPEND KINDLING_C10D_DEFINITIONS USE_C10D_GLOO)

# Whether gloo reduces bfloat16 itself: only where the installed c10d's type switch lists it
# (LibTorch 2.15 does, 1.13 has no such header); elsewhere kindling widens bfloat16 to float32 for
# gloo's reductions, which sends twice the bytes (a bf16 hook then compresses nothing).
find_file(KINDLING_GLOO_TYPE_SWITCH torch/csrc/distributed/c10d/gloo/ProcessGroupGlooDetail.hpp
  PATHS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH)
if(KINDLING_GLOO_TYPE_SWITCH)
  file(READ "${KINDLING_GLOO_TYPE_SWITCH}" KINDLING_GLOO_TYPES)
  string(FIND "${KINDLING_GLOO_TYPES}" "ScalarType::BFloat16" KINDLING_GLOO_BF16_AT)
  if(KINDLING_GLOO_BF16_AT GREATER -1)
    set(KINDLING_GLOO_REDUCES_BF16 ON)
  endif()
endif()
