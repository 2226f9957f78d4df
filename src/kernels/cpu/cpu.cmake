# The fast CPU backend (included by src/kernels/CMakeLists.txt): OpenBLAS sgemm for the dense
# products, OpenMP threads over rows / heads / tiles, hand-blocked attention tiles (README.md).
#
# OpenBLAS: Debian's libopenblas-dev (pkg-config `openblas`). We call it from inside our own OpenMP
# threads with its thread count set to 1, so its pthread and OpenMP builds behave the same.
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
find_package(OpenMP REQUIRED COMPONENTS CXX)

add_library(sovai_kernels_cpu STATIC
  ${CMAKE_CURRENT_LIST_DIR}/attention.cc
  ${CMAKE_CURRENT_LIST_DIR}/context.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/inference.cc
  ${CMAKE_CURRENT_LIST_DIR}/q8_0_int8.cc
  ${CMAKE_CURRENT_LIST_DIR}/weights.cc
)
target_link_libraries(sovai_kernels_cpu
  PUBLIC sovai_kernels
  PRIVATE PkgConfig::OPENBLAS OpenMP::OpenMP_CXX)
# -O3: the loops here are written for the auto-vectorizer (RelWithDebInfo alone gives -O2).
# -fno-math-errno: lets sqrt vectorize; no code here reads errno. -fno-trapping-math: lets GCC turn
# the selects in ExpF and in masks into branch-free vector code for AVX2 and SSE (it only gives up
# floating-point exception flags, which nothing here reads; results are unchanged).
# -ffp-contract=off: rounding as the reference writes it (NF4 and bf16 dequantization must be
# bit-exact, AdamW is computed exactly as the reference does). attention.cc and inference.cc opt
# back in to fused multiply-adds: their products are compared with tolerances anyway.
target_compile_options(sovai_kernels_cpu PRIVATE -O3 -fno-math-errno -fno-trapping-math
  -ffp-contract=off)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/attention.cc
  ${CMAKE_CURRENT_LIST_DIR}/inference.cc PROPERTIES COMPILE_OPTIONS -ffp-contract=fast)

# Every op against the reference backend on the same random inputs (forward outputs and gradients).
# Registered like sovai_test() does, plus OMP_WAIT_POLICY=passive: libgomp's default keeps idle
# threads spinning for milliseconds after every parallel region, which on a machine shared with
# other tests (ctest -j, CI) takes cores from them and triples this test's wall time.
if(NOT SOVAI_FUZZ)
  add_executable(kernels_cpu_consistency_test ${CMAKE_CURRENT_LIST_DIR}/backend_consistency_test.cc)
  target_link_libraries(kernels_cpu_consistency_test PRIVATE sovai_kernels_cpu
    sovai_kernels_reference GTest::gtest GTest::gtest_main)
  gtest_discover_tests(kernels_cpu_consistency_test
    DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS unit TIMEOUT 120 ENVIRONMENT OMP_WAIT_POLICY=passive
    TEST_PREFIX "kernels_cpu_consistency_test.")

  # The int8 Q8_0 product: every kernel this CPU runs against a plain reference, bit for bit.
  add_executable(kernels_q8_0_int8_test ${CMAKE_CURRENT_LIST_DIR}/q8_0_int8_test.cc)
  target_link_libraries(kernels_q8_0_int8_test PRIVATE sovai_kernels_cpu OpenMP::OpenMP_CXX
    GTest::gtest GTest::gtest_main)
  target_compile_options(kernels_q8_0_int8_test PRIVATE -ffp-contract=off)
  gtest_discover_tests(kernels_q8_0_int8_test
    DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS unit TIMEOUT 120 ENVIRONMENT OMP_WAIT_POLICY=passive
    TEST_PREFIX "kernels_q8_0_int8_test.")
endif()

# Micro-benchmark (bench/kernels/README.md): reference vs cpu per op, and sgemm against its peak.
# Defined here because it belongs with the backend it measures; bench/CMakeLists.txt may take it.
add_executable(kernels_bench ${PROJECT_SOURCE_DIR}/bench/kernels/kernels_bench.cc)
target_link_libraries(kernels_bench PRIVATE sovai_kernels_cpu sovai_kernels_reference
  PkgConfig::OPENBLAS OpenMP::OpenMP_CXX)
