# GPU-runtime half of the tuner: driver loading without a GPU, driver error messages, benchmark statistics and
# re-measure policy, the per-GPU benchmark lock across processes (CPU), and the runtime + Measure on a device (gpu).
dflash_add_test(test_runtime
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/runtime_driver_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/runtime_stats_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/runtime_device_lock_test.cc
  LIBS dflash_tuner ${CMAKE_DL_LIBS}
  LABELS runtime)

dflash_add_test(test_runtime_gpu
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/runtime_gpu_test.cc
  LIBS dflash_tuner
  LABELS gpu)
