# Constrained decoding for response_format json_object / json_schema (json_constraint.h). The
# fuzz target for the schema compiler and the acceptor is in tests/fuzz/serve_targets.cmake.
add_library(sovai_serve_constraint STATIC ${CMAKE_CURRENT_LIST_DIR}/json_constraint.cc
  ${CMAKE_CURRENT_LIST_DIR}/json_schema.cc ${CMAKE_CURRENT_LIST_DIR}/json_terminals.cc)
target_include_directories(sovai_serve_constraint PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(sovai_serve_constraint PUBLIC sovai_base sovai_serve_request)

sovai_test(NAME serve_json_constraint_test LABELS unit DEPS sovai_serve_constraint sovai_model_tokenizer
  SRCS
  ${CMAKE_CURRENT_LIST_DIR}/json_constraint_test.cc
)
if(TARGET serve_json_constraint_test)  # tests are not built in the fuzz configuration
  target_compile_definitions(serve_json_constraint_test PRIVATE
    SOVAI_TINY_LLAMA_TOKENIZER="${PROJECT_SOURCE_DIR}/models/sovai-tiny-llama/tokenizer.json")
endif()
