# GGUF fuzz target (included by tests/fuzz/CMakeLists.txt): arbitrary bytes through the GGUF
# reader's header, metadata and tensor-directory parser (src/model/gguf.h).
sovai_fuzz_target(NAME gguf_header SRCS gguf_header_fuzzer.cc DEPS sovai_model_gguf)
