# GGUF (included by src/model/CMakeLists.txt): the GGUF writer and metadata reader (gguf.h), Q8_0
# quantization (kernels/q8_0.h) and the Hugging Face llama -> GGUF export (gguf_llama.h). See
# docs/formats/gguf.md. The independent check (a Python reader written from the spec) is in
# tests/model_gguf; the reader's fuzz target in tests/fuzz/gguf_targets.cmake.
add_library(sovai_model_gguf STATIC
  ${CMAKE_CURRENT_LIST_DIR}/gguf.cc
  ${CMAKE_CURRENT_LIST_DIR}/gguf_llama.cc
)
target_include_directories(sovai_model_gguf PUBLIC ${PROJECT_SOURCE_DIR}/src)
# sovai_model_formats: only for the adapters from a loaded checkpoint (LlamaArchFromConfig,
# HfTensorsFrom in gguf_llama.h).
target_link_libraries(sovai_model_gguf PUBLIC sovai_base sovai_tensor sovai_kernels sovai_model_formats)

sovai_test(NAME model_gguf_test LABELS unit DEPS sovai_model_gguf SRCS
  ${CMAKE_CURRENT_LIST_DIR}/gguf_test.cc
)
sovai_test(NAME model_gguf_llama_test LABELS unit DEPS sovai_model_gguf SRCS
  ${CMAKE_CURRENT_LIST_DIR}/gguf_llama_test.cc
)
