# trainer/train decoding: speculative decoding evaluation and the tiny preset's synthetic data. CPU only.
set(_dir ${CMAKE_CURRENT_LIST_DIR})
dflash_add_test(test_trainer_spec_decode SOURCES ${_dir}/train_spec_decode_test.cc LIBS dflash_trainer LABELS cpu)
dflash_add_test(test_trainer_synthetic_data SOURCES ${_dir}/train_synthetic_data_test.cc LIBS dflash_trainer
                LABELS cpu)
