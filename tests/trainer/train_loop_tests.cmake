# The training loop end to end on a small hybrid target (CPU): loss falls on learnable data, resume continues
# bit-for-bit, interrupted checkpoint writes leave the last checkpoint usable, bad input fails cleanly.
set(_dir ${CMAKE_CURRENT_LIST_DIR})
dflash_add_test(test_trainer_loop SOURCES ${_dir}/train_loop_test.cc LIBS dflash_trainer LABELS cpu TIMEOUT 900)
