# Model formats (included by src/model/CMakeLists.txt): config.json, safetensors (single and
# sharded, memory-mapped), PEFT LoRA adapters and whole Hugging Face model directories.
# See docs/formats/safetensors.md, model-config.md, peft-adapter.md; limits in limits.h.
add_library(sovai_model_formats STATIC
  ${CMAKE_CURRENT_LIST_DIR}/model_config.cc
  ${CMAKE_CURRENT_LIST_DIR}/model_dir.cc
  ${CMAKE_CURRENT_LIST_DIR}/peft_adapter.cc
  ${CMAKE_CURRENT_LIST_DIR}/pooling_config.cc
  ${CMAKE_CURRENT_LIST_DIR}/safetensors.cc
)
target_include_directories(sovai_model_formats PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(sovai_model_formats
  PUBLIC sovai_base sovai_tensor nlohmann_json::nlohmann_json)

# Each test generates its small models (a 2-layer model of hidden size 64 at most) in a temporary
# directory; nothing large is shipped. safetensors_test also checks written files with an
# independent Python reader (skipped when python3 is missing).
sovai_test(NAME model_formats_test LABELS unit DEPS sovai_model_formats SRCS
  ${CMAKE_CURRENT_LIST_DIR}/model_config_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/model_dir_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/peft_adapter_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/pooling_config_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/safetensors_test.cc
  SEPARATE ${CMAKE_CURRENT_LIST_DIR}/peft_adapter_test.cc ${CMAKE_CURRENT_LIST_DIR}/safetensors_test.cc
)
# The fuzz target's seed corpus doubles as a fixture: each valid_* file must read, each bad_* not.
if(TARGET model_formats_test)
  target_compile_definitions(model_formats_test PRIVATE
    SOVAI_SAFETENSORS_CORPUS_DIR="${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/safetensors_header")
endif()
