# The whole drafter step with cached tuned kernels on a GPU against the CPU reference path (gpu; skips without a GPU
# or without LibTorch's CUDA backend).
dflash_add_test(test_trainer_step_gpu SOURCES ${CMAKE_CURRENT_LIST_DIR}/train_step_gpu_test.cc LIBS dflash_trainer
                LABELS gpu)
# The 27B shapes of the full-size step come from the benchmark's config files (one source for both).
target_compile_definitions(test_trainer_step_gpu PRIVATE
                           DFLASH_BENCH_CONFIGS="${PROJECT_SOURCE_DIR}/tools/bench/configs")
