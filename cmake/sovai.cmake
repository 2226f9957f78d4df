# Helpers shared by every module's CMakeLists.txt.

# sovai_test(NAME name SRCS a_test.cc ... DEPS lib ... LABELS unit|integration|...
#            [SEPARATE file_test.cc ...])
# One gtest binary; each TEST becomes its own ctest entry carrying LABELS.
# The fuzz build (SOVAI_FUZZ=ON) builds fuzz targets only: it registers no unit tests.
#
# Test code is compiled without optimization and as one translation unit per binary (a unity
# build): the code under test lives in the libraries, built with the project's flags, and the
# test bodies' own speed rarely matters, while optimizing and parsing gtest and our headers once
# per file was most of a cold build's time (a typical test file: 40 s at -O2, 19 s at -O0, 9 s of
# it parsing). SEPARATE names files that keep their own translation unit, where their file-local
# helpers share a name with another file's.
function(sovai_test)
  if(SOVAI_FUZZ)
    return()
  endif()
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS;SEPARATE" ${ARGN})
  add_executable(${T_NAME} ${T_SRCS})
  set_target_properties(${T_NAME} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 0)
  set_source_files_properties(${T_SEPARATE} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  target_compile_options(${T_NAME} PRIVATE $<$<CONFIG:RelWithDebInfo>:-O0>)
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} GTest::gtest GTest::gtest_main)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  gtest_discover_tests(${T_NAME}
    DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    TEST_PREFIX "${T_NAME}.")
endfunction()
