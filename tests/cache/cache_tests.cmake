# Cache tests: unit tests of every guarantee plus the multi-process stress test.
set(_dir ${CMAKE_CURRENT_LIST_DIR})
dflash_add_test(test_cache
  SOURCES ${_dir}/key_test.cc ${_dir}/named_lock_test.cc ${_dir}/kernel_cache_test.cc ${_dir}/bundle_test.cc
  LIBS dflash_cache SQLite::SQLite3)
dflash_add_test(test_cache_stress
  SOURCES ${_dir}/multiprocess_test.cc
  LIBS dflash_cache
  TIMEOUT 900)
