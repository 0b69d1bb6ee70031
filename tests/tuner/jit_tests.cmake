# JIT half of the tuner: configs, NVRTC compiles for every arch, ptxas reports, source hash, arch limits,
# pruning, thread pool. CPU only (NVRTC needs no GPU).
dflash_add_test(test_jit
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/jit_kernel_family_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/jit_nvrtc_compile_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/jit_ptxas_report_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/jit_source_hash_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/jit_arch_limits_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/jit_thread_pool_test.cc
  LIBS dflash_tuner
  LABELS jit)
target_compile_definitions(test_jit PRIVATE DFLASH_JIT_TESTDATA_DIR="${CMAKE_CURRENT_LIST_DIR}/testdata")

# The same cubins on a GPU (skips without one): load, resolve lowered names, float64 reference check.
dflash_add_test(test_jit_gpu
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/jit_gpu_load_test.cc
  LIBS dflash_tuner
  LABELS gpu)
target_compile_definitions(test_jit_gpu PRIVATE DFLASH_JIT_TESTDATA_DIR="${CMAKE_CURRENT_LIST_DIR}/testdata")
