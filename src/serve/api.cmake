# The OpenAI API layer (included by src/serve/CMakeLists.txt): request parsing and validation,
# responses, stream chunks and errors (openai_api.h, docs/api/openai.md), and the response cache
# (response_cache.h). No I/O: the HTTP wiring lives with the server.
add_library(sovai_serve_api STATIC ${CMAKE_CURRENT_LIST_DIR}/openai_api.cc
  ${CMAKE_CURRENT_LIST_DIR}/openai_responses.cc
  ${CMAKE_CURRENT_LIST_DIR}/pooling_api.cc)
target_include_directories(sovai_serve_api PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(sovai_serve_api PUBLIC sovai_base sovai_serve_request sovai_model_template)

add_library(sovai_serve_response_cache STATIC ${CMAKE_CURRENT_LIST_DIR}/response_cache.cc)
target_include_directories(sovai_serve_response_cache PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(sovai_serve_response_cache PUBLIC Threads::Threads)

sovai_test(NAME serve_api_test LABELS unit DEPS sovai_serve_api sovai_serve_sampler SRCS
  ${CMAKE_CURRENT_LIST_DIR}/openai_api_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/pooling_api_test.cc
)
sovai_test(NAME serve_response_cache_test LABELS unit DEPS sovai_serve_response_cache SRCS
  ${CMAKE_CURRENT_LIST_DIR}/response_cache_test.cc
)
