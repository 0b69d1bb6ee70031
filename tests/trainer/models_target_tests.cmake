# trainer/models target tests: the frozen target's features and logits (Qwen3.5 hybrid and Qwen3 dense) against a
# double-precision per-token reference, packing, HF save/load round trips and partial loads. CPU only.
set(_dir ${CMAKE_CURRENT_LIST_DIR})
dflash_add_test(test_trainer_target_model SOURCES ${_dir}/models_target_test.cc LIBS dflash_trainer LABELS cpu)
