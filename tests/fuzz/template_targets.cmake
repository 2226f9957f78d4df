# The chat-template interpreter (src/model/jinja.h): arbitrary bytes as a template must parse or
# fail cleanly; a template that parses must render a fixed conversation, or fail cleanly, within
# small limits. Included by tests/fuzz/CMakeLists.txt; seed corpus in corpus/jinja_template/.
sovai_fuzz_target(NAME jinja_template SRCS jinja_template_fuzzer.cc DEPS sovai_model_template
                  MAX_LEN 16384)
