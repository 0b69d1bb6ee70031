# trainer/ops tests: ReferenceOps against scalar loops in double and the kernel requests against the warmup presets
# (cpu); CachedKernelOps against ReferenceOps on a GPU (gpu; skips without a GPU or without LibTorch's CUDA backend).
set(_dir ${CMAKE_CURRENT_LIST_DIR})
dflash_add_test(test_trainer_ops_reference SOURCES ${_dir}/ops_reference_test.cc LIBS dflash_trainer LABELS cpu)
dflash_add_test(test_trainer_ops_kernel_requests SOURCES ${_dir}/ops_kernel_requests_test.cc LIBS dflash_trainer
                LABELS cpu)
dflash_add_test(test_trainer_ops_cached_kernel_gpu SOURCES ${_dir}/ops_cached_kernel_gpu_test.cc LIBS dflash_trainer
                LABELS gpu)
