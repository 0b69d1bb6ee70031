# trainer/data tests: JSONL dataset, batcher (shuffle, pad/pack, resume), anchors, loss weights. CPU only.
set(_dir ${CMAKE_CURRENT_LIST_DIR})
dflash_add_test(test_trainer_data
  SOURCES ${_dir}/data_jsonl_test.cc ${_dir}/data_batcher_test.cc ${_dir}/data_anchors_test.cc
          ${_dir}/data_loss_weights_test.cc
  LIBS dflash_trainer_core
  LABELS cpu)
