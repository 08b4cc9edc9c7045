# The nccl backend (LibTorch c10d's ProcessGroupNCCL). Included by the root CMakeLists.txt once the
# kindling target exists, when KINDLING_WITH_NCCL is on (the root has checked that LibTorch has CUDA).

# nccl.h: from a CUDA toolkit, NCCL_ROOT, or the nvidia-nccl wheel beside pip's torch.
find_path(KINDLING_NCCL_INCLUDE_DIR nccl.h
  HINTS $ENV{NCCL_ROOT}/include ${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include ${CUDAToolkit_INCLUDE_DIRS})
if(NOT KINDLING_NCCL_INCLUDE_DIR)
  message(FATAL_ERROR "KINDLING_WITH_NCCL is ON but nccl.h was not found: set NCCL_ROOT, or configure with "
    "-DKINDLING_WITH_NCCL=OFF")
endif()
target_sources(kindling PRIVATE ${CMAKE_CURRENT_LIST_DIR}/nccl_backend.cpp)
target_include_directories(kindling PRIVATE ${KINDLING_NCCL_INCLUDE_DIR})
# Only this file sees ProcessGroupNCCL (USE_C10D_NCCL), so it cannot share the library's
# precompiled header or a unity batch (both are compiled without that macro).
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/nccl_backend.cpp PROPERTIES
  COMPILE_DEFINITIONS USE_C10D_NCCL SKIP_PRECOMPILE_HEADERS ON SKIP_UNITY_BUILD_INCLUSION ON)
