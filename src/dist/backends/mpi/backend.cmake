# The mpi backend (Open MPI, its C API). Included by the root CMakeLists.txt once the kindling target
# exists, when KINDLING_WITH_MPI is on (the root enables the C language MPI's module needs: CMake
# wants a language enabled in the folder of the targets that use it).

find_package(MPI COMPONENTS C)
if(NOT MPI_C_FOUND)
  message(FATAL_ERROR "KINDLING_WITH_MPI is ON but no MPI was found: install libopenmpi-dev "
    "(scripts/install-deps.sh) or configure with -DKINDLING_WITH_MPI=OFF")
endif()
target_sources(kindling PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/mpi_backend.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mpi_op.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shm_allreduce.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shm_kernels.cpp
  ${CMAKE_CURRENT_LIST_DIR}/progress_store.cpp)
target_link_libraries(kindling PRIVATE MPI::MPI_C)
