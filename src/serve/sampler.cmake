# Sampler and text stream (included by src/serve/CMakeLists.txt).
# sovai_serve_sampler: logits to the next token, with penalties, the constrained-decoding mask and
# logprobs (sampler.h). sovai_serve_text: token ids to streamed text with stop strings
# (text_stream.h), on the tokenizer's TokenBytes.
add_library(sovai_serve_sampler STATIC ${CMAKE_CURRENT_LIST_DIR}/sampler.cc)
target_include_directories(sovai_serve_sampler PUBLIC ${PROJECT_SOURCE_DIR}/src)
# sovai_kernels for kernels::SplitMix64, the engine's one seeded hash.
target_link_libraries(sovai_serve_sampler PUBLIC sovai_base sovai_serve_request
  PRIVATE sovai_kernels)

add_library(sovai_serve_text STATIC ${CMAKE_CURRENT_LIST_DIR}/text_stream.cc)
target_include_directories(sovai_serve_text PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(sovai_serve_text PUBLIC sovai_base sovai_model_tokenizer)

sovai_test(NAME serve_sampler_test LABELS unit DEPS sovai_serve_sampler SRCS
  ${CMAKE_CURRENT_LIST_DIR}/sampler_test.cc
)
sovai_test(NAME serve_text_stream_test LABELS unit DEPS sovai_serve_text SRCS
  ${CMAKE_CURRENT_LIST_DIR}/text_stream_test.cc
)
# The shipped tokenizer (models/sovai-tiny-llama) is read from the source tree.
if(TARGET serve_text_stream_test)
  target_compile_definitions(serve_text_stream_test PRIVATE
    SOVAI_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endif()
