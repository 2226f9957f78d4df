# Job volumes (included by src/exec/CMakeLists.txt): volume specs, the S3 client and volume sync.
# sovai_objstore is linked for SigV4 signing (sigv4.h), the bucket-name and UTF-8 rules (names.h)
# and the XML writer (s3_xml.h); responses are parsed with pugixml directly, since objstore's
# parsers are for request bodies only.
add_library(sovai_exec_volumes STATIC
  ${CMAKE_CURRENT_LIST_DIR}/s3_client.cc
  ${CMAKE_CURRENT_LIST_DIR}/volume_spec.cc
  ${CMAKE_CURRENT_LIST_DIR}/volume_sync.cc
  ${CMAKE_CURRENT_LIST_DIR}/volume_units.cc
)
target_include_directories(sovai_exec_volumes PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(sovai_exec_volumes
  PUBLIC sovai_base sovai_net sovai_objstore
  PRIVATE pugixml::pugixml)

# Pure parsing: specs, the key <-> path rules.
sovai_test(NAME exec_volume_spec_test LABELS unit DEPS sovai_exec_volumes SRCS
  ${CMAKE_CURRENT_LIST_DIR}/volume_spec_test.cc
)

# Against a real in-process object store and S3 front end on a loopback port.
sovai_test(NAME exec_s3_client_test LABELS integration DEPS sovai_exec_volumes SRCS
  ${CMAKE_CURRENT_LIST_DIR}/s3_client_test.cc
)
sovai_test(NAME exec_volume_sync_test LABELS integration DEPS sovai_exec_volumes SRCS
  ${CMAKE_CURRENT_LIST_DIR}/volume_sync_test.cc
)
