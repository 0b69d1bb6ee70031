# Warmup orchestration tests: the search plan (pure), and the real dflash-tune binary in separate processes.
set(_dir ${CMAKE_CURRENT_LIST_DIR})
dflash_add_test(test_search SOURCES ${_dir}/search_test.cc LIBS dflash_tuner)
dflash_add_test(test_warmup_cli
  SOURCES ${_dir}/warmup_cli_test.cc
  LIBS dflash_tuner dflash_cache SQLite::SQLite3
  TIMEOUT 1800)
target_compile_definitions(test_warmup_cli PRIVATE DFLASH_TUNE_BIN="$<TARGET_FILE:dflash-tune>")
add_dependencies(test_warmup_cli dflash-tune)
if(EXISTS ${_dir}/warmup_gpu_test.cc)
  dflash_add_test(test_warmup_gpu
    SOURCES ${_dir}/warmup_gpu_test.cc
    LIBS dflash_kernels dflash_tuner dflash_cache SQLite::SQLite3
    LABELS gpu
    TIMEOUT 1800)
  target_compile_definitions(test_warmup_gpu PRIVATE DFLASH_TUNE_BIN="$<TARGET_FILE:dflash-tune>")
  add_dependencies(test_warmup_gpu dflash-tune)
endif()
