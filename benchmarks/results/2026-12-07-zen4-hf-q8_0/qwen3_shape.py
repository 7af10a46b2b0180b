"""A Qwen3-0.6B-shaped HF folder of random weights (bf16, its real vocabulary size), for timing the runners on that
shape: 28 layers, hidden 1024, 16 query / 8 key-value heads of 128, MLP 3072, vocabulary 151936, tied head.

    PYTHONPATH=src:. python benchmarks/results/2026-12-07-zen4-hf-q8_0/qwen3_shape.py FOLDER
"""
import sys

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from tests.tiny_models import make_tokenizer

config = Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                     num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                     rope_theta=1000000.0, tie_word_embeddings=True, eos_token_id=2, bos_token_id=1, pad_token_id=0)
torch.manual_seed(0)
model = Qwen3ForCausalLM(config).to(torch.bfloat16).eval()
model.save_pretrained(sys.argv[1])
make_tokenizer().save_pretrained(sys.argv[1])       # a 64-word tokenizer: forward-cost feeds token ids
