# trainer/dist: rank environment, shard rule and launcher arguments (pure); the c10d communicator over gloo with
# real processes; dflash-train with several ranks as processes (2 x batch 1 == 1 x batch 2, resume, a killed rank,
# bad environment, the target on another GPU); the placement arithmetic and the device-routed ops; the gradient
# all-reduce overlapped with the backward. CPU only (gloo); the multi-rank tests skip when the build has no gloo.
set(_dir ${CMAKE_CURRENT_LIST_DIR})
dflash_add_test(test_dist_rank SOURCES ${_dir}/dist_rank_test.cc LIBS dflash_trainer LABELS cpu TIMEOUT 60)
dflash_add_test(test_dist_communicator SOURCES ${_dir}/dist_communicator_test.cc LIBS dflash_trainer LABELS cpu
                TIMEOUT 120)
dflash_add_test(test_dist_train SOURCES ${_dir}/dist_train_test.cc LIBS dflash_trainer LABELS cpu TIMEOUT 300)
target_compile_definitions(test_dist_train PRIVATE DFLASH_TRAIN_BIN="$<TARGET_FILE:dflash-train>")
add_dependencies(test_dist_train dflash-train)
dflash_add_test(test_dist_placement SOURCES ${_dir}/dist_placement_test.cc LIBS dflash_trainer LABELS cpu TIMEOUT 60)
dflash_add_test(test_dist_grad_sync SOURCES ${_dir}/dist_grad_sync_test.cc LIBS dflash_trainer LABELS cpu
                TIMEOUT 120)
