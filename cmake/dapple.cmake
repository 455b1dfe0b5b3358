# dapple_cc_library(NAME SRCS ... DEPS ...): one static library per folder, compiled as unity
# sources of up to 8 files when DAPPLE_UNITY_BUILD (CMakeLists.txt).
function(dapple_cc_library name)
  cmake_parse_arguments(A "" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${A_SRCS})
  if(DAPPLE_UNITY_BUILD)
    set_target_properties(${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${A_DEPS})
endfunction()

# dapple_cc_test(NAME SRCS ... DEPS ... [LABELS ...] [TIMEOUT s]): a GoogleTest binary
# whose tests are registered with ctest one by one. Every test has a ctest timeout, so a
# hang fails instead of stalling CI.
function(dapple_cc_test name)
  cmake_parse_arguments(A "" "TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 120)
  endif()
  if(NOT A_LABELS)
    set(A_LABELS unit)
  endif()
  add_executable(${name} ${A_SRCS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gmock GTest::gtest_main)
  # A test that calls GTEST_SKIP (a gpu test on a machine without a GPU) is reported by ctest as
  # skipped, not passed.
  gtest_discover_tests(${name}
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT}
               SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]"
               # One variable only: gtest_discover_tests splits a value at ';', so a second
               # one would be lost. Tests find the source root from DAPPLE_SOURCE_DIR when the
               # caller exports it (scripts/test does), else from their own file path.
               ENVIRONMENT "DAPPLE_BUILD_DIR=${PROJECT_BINARY_DIR}")
endfunction()
