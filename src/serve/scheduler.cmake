# The KV cache block manager with prefix caching (block_manager.h) and the continuous-batching
# scheduler (scheduler.h): pure logic over token and block ids, no model, no HTTP.
add_library(sovai_serve_scheduler STATIC
  ${CMAKE_CURRENT_LIST_DIR}/block_manager.cc
  ${CMAKE_CURRENT_LIST_DIR}/scheduler.cc
)
target_include_directories(sovai_serve_scheduler PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(sovai_serve_scheduler PUBLIC sovai_base sovai_serve_request)

sovai_test(NAME serve_block_manager_test LABELS unit DEPS sovai_serve_scheduler SRCS
  ${CMAKE_CURRENT_LIST_DIR}/block_manager_test.cc
)
sovai_test(NAME serve_scheduler_test LABELS unit DEPS sovai_serve_scheduler SRCS
  ${CMAKE_CURRENT_LIST_DIR}/scheduler_test.cc
)
