# The Llama-family model, forward and backward over the ops of src/kernels (included by
# src/model/CMakeLists.txt). Checked against PyTorch by tests/reference/llama_golden.py.
add_library(sovai_model_llama STATIC ${CMAKE_CURRENT_LIST_DIR}/llama.cc
  ${CMAKE_CURRENT_LIST_DIR}/llama_infer.cc)
target_include_directories(sovai_model_llama PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(sovai_model_llama PUBLIC sovai_model_formats sovai_kernels)

sovai_test(NAME model_llama_infer_test LABELS unit
  DEPS sovai_model_llama sovai_kernels_reference sovai_kernels_cpu
  SRCS ${CMAKE_CURRENT_LIST_DIR}/llama_infer_test.cc)
