# The tokenizer.json loader (src/model/tokenizer.h): arbitrary bytes as a tokenizer.json must load
# or fail cleanly; a tokenizer that loads must encode and decode a fixed text. Included by
# tests/fuzz/CMakeLists.txt; seed corpus in corpus/tokenizer_json/.
sovai_fuzz_target(NAME tokenizer_json SRCS tokenizer_json_fuzzer.cc DEPS sovai_model_tokenizer
                  MAX_LEN 65536)
