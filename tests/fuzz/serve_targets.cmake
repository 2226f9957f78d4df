# Fuzz target of src/serve's constrained decoding (included from tests/fuzz/CMakeLists.txt):
# arbitrary bytes as a JSON Schema must compile or fail cleanly; a schema that compiles must
# generate without getting stuck, with a mask that agrees with Accept, and end in valid JSON.
# Seed corpus in corpus/json_schema/.
sovai_fuzz_target(NAME json_schema SRCS json_schema_fuzzer.cc DEPS sovai_serve_constraint
                  MAX_LEN 16384)

# The OpenAI request parser (src/serve/openai_api.h): arbitrary bytes as a request body must parse
# or be refused with a 400; seed corpus in corpus/openai_request/.
sovai_fuzz_target(NAME openai_request SRCS openai_request_fuzzer.cc
                  DEPS sovai_serve_api sovai_serve_sampler MAX_LEN 65536)
