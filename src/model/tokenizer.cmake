# Tokenizer (included by src/model/CMakeLists.txt): tokenizer.json BPE tokenizers (tokenizer.h)
# and the byte-level BPE trainer (tokenizer_trainer.h). See docs/formats/tokenizer.md.
# PCRE2 (UTF + JIT) runs the Split patterns; utf8proc does NFC/NFKC and character categories.
# The parity test against the JavaScript reference is in tests/model; the loader's fuzz target in
# tests/fuzz/tokenizer_targets.cmake; the benchmark in bench/tokenizer.
find_package(PkgConfig REQUIRED)
pkg_check_modules(SOVAI_TOKENIZER_DEPS REQUIRED IMPORTED_TARGET libpcre2-8 libutf8proc)

add_library(sovai_model_tokenizer STATIC
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_bpe.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_pipeline.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_regex.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_trainer.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_unicode.cc
)
target_include_directories(sovai_model_tokenizer PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(sovai_model_tokenizer
  PUBLIC sovai_base nlohmann_json::nlohmann_json
  PRIVATE PkgConfig::SOVAI_TOKENIZER_DEPS)

sovai_test(NAME model_tokenizer_test LABELS unit DEPS sovai_model_tokenizer SRCS
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_bpe_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_pipeline_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_regex_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_trainer_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_unicode_test.cc
)
