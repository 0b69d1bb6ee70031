"""Writes tests/trainer/testdata/transformers-<version>/*.config.json: configs as transformers itself saves them
(Qwen3.5 text model, the Qwen3.5 multimodal wrapper, Qwen3 dense), which the trainer's config tests load and write
back. Run with the interop environment's python (tests/interop/setup_venv.sh):
    python tests/interop/make_config_fixtures.py tests/trainer/testdata/transformers-5.23.0
"""
import sys
import tempfile
from pathlib import Path

from transformers import Qwen3_5Config, Qwen3_5TextConfig, Qwen3Config


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    text = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=8, num_attention_heads=4,
                num_key_value_heads=2, head_dim=64, linear_num_key_heads=2, linear_num_value_heads=4,
                linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4, vocab_size=1024,
                rms_norm_eps=1e-6, max_position_embeddings=4096,
                rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25})
    configs = {}
    configs["qwen3_5_text"] = Qwen3_5TextConfig(**text, dtype="float32")
    configs["qwen3_5_text"].architectures = ["Qwen3_5ForCausalLM"]
    configs["qwen3_5"] = Qwen3_5Config(text_config=text, dtype="bfloat16")
    configs["qwen3_5"].architectures = ["Qwen3_5ForConditionalGeneration"]
    configs["qwen3"] = Qwen3Config(hidden_size=96, intermediate_size=192, num_hidden_layers=5, num_attention_heads=6,
                                   num_key_value_heads=2, head_dim=16, vocab_size=300, rms_norm_eps=1e-6,
                                   tie_word_embeddings=True, attention_bias=True,
                                   rope_parameters={"rope_type": "default", "rope_theta": 1e6}, dtype="bfloat16")
    configs["qwen3"].architectures = ["Qwen3ForCausalLM"]
    for name, config in configs.items():
        with tempfile.TemporaryDirectory() as d:
            config.save_pretrained(d)
            (out / f"{name}.config.json").write_text((Path(d) / "config.json").read_text())


if __name__ == "__main__":
    main(Path(sys.argv[1]))
