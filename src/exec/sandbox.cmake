# Host resources, the bubblewrap sandbox, job-log capture and the Slurm commands and documents
# (resources.h, sandbox.h, log_capture.h, slurm.h, slurm_plan.h). Included by
# src/exec/CMakeLists.txt.

add_library(sovai_exec_sandbox STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/log_capture.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/resources.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/sandbox.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/slurm.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/slurm_plan.cc
)
target_include_directories(sovai_exec_sandbox PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(sovai_exec_sandbox PUBLIC sovai_base)

sovai_test(NAME exec_resources_test LABELS unit DEPS sovai_exec_sandbox SRCS
  ${CMAKE_CURRENT_SOURCE_DIR}/resources_test.cc
)

sovai_test(NAME exec_slurm_test LABELS unit DEPS sovai_exec_sandbox SRCS
  ${CMAKE_CURRENT_SOURCE_DIR}/slurm_test.cc
)

# The Slurm agent's plan and status documents (values only: no S3 client is linked).
sovai_test(NAME exec_slurm_plan_test LABELS unit DEPS sovai_exec_sandbox SRCS
  ${CMAKE_CURRENT_SOURCE_DIR}/slurm_plan_test.cc
)

sovai_test(NAME exec_log_capture_test LABELS unit DEPS sovai_exec_sandbox SRCS
  ${CMAKE_CURRENT_SOURCE_DIR}/log_capture_test.cc
)

# One binary, two labels: the argv/validation tests are unit tests; SandboxIntegrationTest.*
# start real bwrap processes (they skip, naming what is missing, where bwrap cannot run).
if(NOT SOVAI_FUZZ)
  add_executable(exec_sandbox_test ${CMAKE_CURRENT_SOURCE_DIR}/sandbox_test.cc)
  target_link_libraries(exec_sandbox_test PRIVATE sovai_exec_sandbox GTest::gtest
                        GTest::gtest_main)
  gtest_discover_tests(exec_sandbox_test
    DISCOVERY_MODE PRE_TEST
    TEST_FILTER "-SandboxIntegrationTest.*"
    TEST_LIST exec_sandbox_unit_tests
    PROPERTIES LABELS "unit" TIMEOUT 120
    TEST_PREFIX "exec_sandbox_test.")
  gtest_discover_tests(exec_sandbox_test
    DISCOVERY_MODE PRE_TEST
    TEST_FILTER "SandboxIntegrationTest.*"
    TEST_LIST exec_sandbox_integration_tests
    PROPERTIES LABELS "integration" TIMEOUT 120
    TEST_PREFIX "exec_sandbox_integration_test.")
endif()
