# trainer/models/drafter and trainer/train/block_loss: the drafter forward and gradients against an independent
# double-precision implementation of spec §3/§4, fresh weights, Save/Load in the public layout; the chunked loss
# against the naive full-logits cross-entropy. CPU only.
set(_dir ${CMAKE_CURRENT_LIST_DIR})
dflash_add_test(test_trainer_models_drafter SOURCES ${_dir}/models_drafter_test.cc LIBS dflash_trainer LABELS cpu)
dflash_add_test(test_trainer_train_block_loss SOURCES ${_dir}/train_block_loss_test.cc LIBS dflash_trainer LABELS cpu)
