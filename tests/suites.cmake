# Writes the CTest tests of one GoogleTest executable, one per test suite: run after the
# executable is built (tests/CMakeLists.txt, kindling_add_test), as CMake's gtest_discover_tests
# does for single tests. A suite's tests share one process, so the process start (LibTorch's
# load: 0.5 s of CPU on 2.15, 0.8 s on 1.13) is paid once per suite instead of once per test:
# hand-written because GoogleTest's CMake module offers one CTest test per test or per
# executable, nothing between.
#   cmake -D EXE=<test executable> -D OUT=<ctest file> -D TIMEOUT=<s> -D PROPERTIES=<list>
#         -D TORCH1_ONLY=<suite,suite...> -P suites.cmake
# PROPERTIES: more CTest properties of every suite, as set_tests_properties takes them (no value
# may hold a semicolon). TORCH1_ONLY: suites labelled torch1_only (tests/CMakeLists.txt says why). A suite passes when its process exits 0: a skipped test (GTEST_SKIP)
# does not make its suite "skipped", so suites with tests that skip where a device is missing
# (the _CUDA ones) keep one CTest test per test (gtest_discover_tests).
cmake_policy(SET CMP0057 NEW)  # if(... IN_LIST ...)
string(REPLACE "," ";" torch1_only "${TORCH1_ONLY}")
execute_process(COMMAND "${EXE}" --gtest_list_tests RESULT_VARIABLE listed OUTPUT_VARIABLE listing
  ERROR_VARIABLE errors TIMEOUT 60)
if(NOT listed EQUAL 0)
  message(FATAL_ERROR "suites.cmake: '${EXE} --gtest_list_tests' exited with ${listed}: ${errors}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
list(JOIN PROPERTIES " " properties)
set(script "")
set(count 0)
foreach(line IN LISTS lines)
  # A suite's line starts at the first column and ends with "." (a typed or parameterized
  # suite adds "  # TypeParam = ..."); its tests' lines are indented.
  if(line MATCHES "^([^ #][^ ]*)\\.( *#.*)?$")
    set(suite "${CMAKE_MATCH_1}")
    set(labels "")
    if(suite IN_LIST torch1_only)
      set(labels "LABELS torch1_only")
    endif()
    string(APPEND script "add_test([=[${suite}]=] [==[${EXE}]==] [==[--gtest_filter=${suite}.*]==] --gtest_brief=1)\n"
      "set_tests_properties([=[${suite}]=] PROPERTIES TIMEOUT ${TIMEOUT} ${properties} ${labels})\n")
    math(EXPR count "${count} + 1")
  endif()
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "suites.cmake: '${EXE} --gtest_list_tests' listed no test suite")
endif()
file(WRITE "${OUT}" "${script}")
