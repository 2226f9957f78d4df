# Chat templates (included by src/model/CMakeLists.txt): the Jinja-subset interpreter for the
# `chat_template` of tokenizer_config.json, and the chat API on top of it. Only base and
# nlohmann_json are needed: the interpreter renders text, it does not tokenize.
add_library(sovai_model_template STATIC
  ${CMAKE_CURRENT_LIST_DIR}/jinja_strings.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_value.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_lexer.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_parser.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_builtins.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_filters.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_methods.cc
  ${CMAKE_CURRENT_LIST_DIR}/chat_template.cc
)
target_include_directories(sovai_model_template PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(sovai_model_template PUBLIC sovai_base nlohmann_json::nlohmann_json)

# The language (against Python Jinja2's output in tests/model_templates/language_cases.json),
# its pieces, and the chat API.
sovai_test(NAME model_template_test LABELS unit DEPS sovai_model_template SRCS
  ${CMAKE_CURRENT_LIST_DIR}/jinja_strings_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_value_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_lexer_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_parser_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_builtins_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/chat_template_test.cc
)
if(TARGET model_template_test)
  target_compile_definitions(model_template_test PRIVATE
    SOVAI_TEMPLATE_TESTDATA_DIR="${PROJECT_SOURCE_DIR}/tests/model_templates")
endif()
