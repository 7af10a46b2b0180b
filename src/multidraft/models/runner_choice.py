"""The `--runner` and `--dtype` options, one definition for `generate`, `bench` and `serve` (kept light: no torch
import)."""

QUANTIZED_RUNNERS = ("quantized", "quantized-q8")     # a model on GGUF blocks, fp32 or 8-bit activations
GGUF_RUNNERS = QUANTIZED_RUNNERS + ("native",)        # every runner over the GGUF's blocks (the GGUF's own model)
RUNNER_CHOICES = ("auto",) + QUANTIZED_RUNNERS + ("native", "eager", "fast", "static")
RUNNER_HELP = ("auto: on a CPU, a model with a GGUF behind it (a pulled alias, a .gguf file) runs on its GGUF blocks "
               "with llama.cpp's 8-bit activations (quantized-q8, on Q4_K/Q6_K/Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 matrices: "
               "integer dot products, batch-invariant and the same bits on every x86 instruction set, so every "
               "lossless method gives greedy's tokens), through our own decoder layers for Qwen2/3, Llama-family, "
               "Mistral, Gemma3 (native: the same bits, no HF module between two tokens); quantized: the same "
               "blocks with fp32 activations (the reference, slower, opt-in); an HF model named with one of these "
               "three runs on its matrices as Q8_0 blocks (quantized once, cached; auto keeps its own weights); "
               "other models the fast runner where it is measured faster (fp32 on an AVX2-only CPU; CUDA), else "
               "eager; static: a static KV cache in shape buckets, CUDA graphs on a GPU")


def add_runner_argument(parser, peers_note: bool = False) -> None:
    note = "; HF generate() peers always run the stock HF model" if peers_note else ""
    parser.add_argument("--runner", choices=RUNNER_CHOICES, default="auto", help=RUNNER_HELP + note)


DTYPE_CHOICES = ("auto", "bfloat16", "float32")


def add_dtype_argument(parser) -> None:
    parser.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto")


def dtype_choice(value: str):
    """What load_model takes for a --dtype choice: None for "auto" (the loader's choice), else the dtype's name."""
    return None if value == "auto" else value
