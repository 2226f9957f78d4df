# Helpers shared by every module's CMakeLists.txt.

# sovai_test(NAME name SRCS a_test.cc ... DEPS lib ... LABELS unit|integration|...)
# One gtest binary; each TEST becomes its own ctest entry carrying LABELS.
# The fuzz build (SOVAI_FUZZ=ON) builds fuzz targets only: it registers no unit tests.
function(sovai_test)
  if(SOVAI_FUZZ)
    return()
  endif()
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SRCS})
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} GTest::gtest GTest::gtest_main)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  gtest_discover_tests(${T_NAME}
    DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    TEST_PREFIX "${T_NAME}.")
endfunction()
