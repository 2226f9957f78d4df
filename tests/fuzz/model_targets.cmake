# Fuzz targets of src/model's formats (included from tests/fuzz/CMakeLists.txt).
sovai_fuzz_target(NAME safetensors_header SRCS safetensors_header_fuzzer.cc DEPS sovai_model_formats
  MAX_LEN 4096)
