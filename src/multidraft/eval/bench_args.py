"""The options `multidraft bench` and its presets share: one helper each for model, dtype, runner, threads and
device (the last four are the ones `generate` and `serve` use too), plus loading a model from them."""

from __future__ import annotations

from multidraft.models.device import add_device_argument
from multidraft.models.runner_choice import add_dtype_argument, add_runner_argument, dtype_choice
from multidraft.models.threads import add_threads_argument, apply_threads

DEFAULT_MODEL = "qwen2.5-coder-1.5b"
THREADS_HELP = "torch threads (default: torch's, all cores; auto: the cores other processes leave idle)"

__all__ = ["DEFAULT_MODEL", "add_model_argument", "add_dtype_argument", "add_runner_argument", "add_threads_argument",
           "add_device_argument", "add_model_options", "load_from_args", "apply_threads", "dtype_choice"]


def add_model_argument(parser, default: str | None = DEFAULT_MODEL, help_text: str = "target model: registry alias, "
                       "HF folder or GGUF file", flag: str = "--model") -> None:
    parser.add_argument(flag, default=default, help=help_text + (f" (default {default})" if default else ""))


def add_model_options(parser, model: str | None = DEFAULT_MODEL, runner: bool = True, dtype: bool = True,
                      device: bool = True, threads: bool = True) -> None:
    """--model, and the --dtype / --runner / --device / --threads a preset wants, with the library's defaults."""
    add_model_argument(parser, model)
    if dtype:
        add_dtype_argument(parser)
    if runner:
        add_runner_argument(parser)
    if device:
        add_device_argument(parser)
    if threads:
        add_threads_argument(parser, THREADS_HELP)


def load_from_args(args, name: str | None = None, **kwargs):
    """Apply --threads (args.threads then holds the count in use, for the reports), then load `name` (default
    --model) with the --dtype / --runner / --device given."""
    import multidraft
    args.threads = apply_threads(getattr(args, "threads", None))
    options = {"dtype": dtype_choice(getattr(args, "dtype", "auto")), "device": getattr(args, "device", None),
               "runner": getattr(args, "runner", "auto")}
    options.update(kwargs)
    return multidraft.load_model(name or args.model, **options)
