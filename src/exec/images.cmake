# OCI / docker-save image unpacking (oci_image.h) and the tar and gzip readers under it
# (tar_reader.h). Included by src/exec/CMakeLists.txt. zlib decompresses gzip layers; the tar
# format is parsed by our own code, so every byte of an untrusted archive goes through our limits
# (image_limits.h).
find_package(ZLIB REQUIRED)

add_library(sovai_exec_images STATIC
  ${CMAKE_CURRENT_LIST_DIR}/oci_image.cc
  ${CMAKE_CURRENT_LIST_DIR}/oci_layers.cc
  ${CMAKE_CURRENT_LIST_DIR}/tar_reader.cc
)
target_include_directories(sovai_exec_images PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(sovai_exec_images PUBLIC sovai_base PRIVATE ZLIB::ZLIB)

# Pure parsing of tar and gzip bytes in memory.
sovai_test(NAME exec_tar_reader_test LABELS unit DEPS sovai_exec_images ZLIB::ZLIB SRCS
  ${CMAKE_CURRENT_LIST_DIR}/tar_reader_test.cc
)

# Unpacking archives built in the test into temporary directories (no processes: unit). The
# ImageSandboxIntegrationTest.* cases run the unpacked image in a real bubblewrap sandbox
# (integration; they skip, naming what is missing, where bwrap cannot run).
if(NOT SOVAI_FUZZ)
  add_executable(exec_oci_image_test ${CMAKE_CURRENT_LIST_DIR}/oci_image_test.cc)
  target_link_libraries(exec_oci_image_test PRIVATE sovai_exec_images sovai_exec_sandbox
                        ZLIB::ZLIB GTest::gtest GTest::gtest_main)
  gtest_discover_tests(exec_oci_image_test
    DISCOVERY_MODE PRE_TEST
    TEST_FILTER "-ImageSandboxIntegrationTest.*"
    TEST_LIST exec_oci_image_unit_tests
    PROPERTIES LABELS "unit" TIMEOUT 120
    TEST_PREFIX "exec_oci_image_test.")
  gtest_discover_tests(exec_oci_image_test
    DISCOVERY_MODE PRE_TEST
    TEST_FILTER "ImageSandboxIntegrationTest.*"
    TEST_LIST exec_oci_image_integration_tests
    PROPERTIES LABELS "integration" TIMEOUT 120
    TEST_PREFIX "exec_oci_image_integration_test.")
endif()
