# trainer/train optimizer pieces: AdamW against torch.optim.AdamW, gradient clipping, the LR schedule. CPU only.
set(_dir ${CMAKE_CURRENT_LIST_DIR})
dflash_add_test(test_trainer_optim SOURCES ${_dir}/train_adamw_test.cc ${_dir}/train_lr_schedule_test.cc
                LIBS dflash_trainer LABELS cpu)
