# trainer/train ops setup: how RunOpShapes splits the kernel shapes between the target's and the drafter's GPU. CPU.
set(_dir ${CMAKE_CURRENT_LIST_DIR})
dflash_add_test(test_trainer_ops_setup SOURCES ${_dir}/train_ops_setup_test.cc LIBS dflash_trainer LABELS cpu)
