# trainer/models decoding: the stateful target decoder and the chunked gated delta rule against the whole-sequence
# reference forward. CPU only.
set(_dir ${CMAKE_CURRENT_LIST_DIR})
dflash_add_test(test_trainer_target_decoder SOURCES ${_dir}/models_target_decoder_test.cc LIBS dflash_trainer
                LABELS cpu)
