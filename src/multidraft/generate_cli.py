"""`multidraft generate`: decode a prompt with any method from the command line."""

from __future__ import annotations

import json
import sys

from multidraft import validation
from multidraft.errors import InvalidOptionError, PromptError
from multidraft.decoders.draft_length import add_draft_length_argument
from multidraft.models.runner_choice import add_dtype_argument, add_runner_argument, dtype_choice
from multidraft.models.device import add_device_argument
from multidraft.models.threads import add_threads_argument, apply_for_model, measure_default_threads
from multidraft.text_stream import TextStreamer


def register(subparsers) -> None:
    parser = subparsers.add_parser("generate", help="generate text with a decoding method",
                                   description="Generate a continuation of PROMPT (or standard input) with METHOD.")
    parser.add_argument("prompt", nargs="?", help="the prompt; read from standard input when omitted or '-'")
    parser.add_argument("--model", default="qwen2.5-coder-1.5b", help="registry alias, HF folder, GGUF file or cached HF id")
    parser.add_argument("--method", default="greedy", help="greedy, sample, beam, pld, ... (see `multidraft methods`)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=None,      # checked by Request.build
                        help=f"0 = greedy, else at least {validation.MIN_TEMPERATURE} (default: 1 for sample, 0 otherwise)")
    parser.add_argument("--top-p", type=validation.cli_sampling("top_p"), default=1.0)
    parser.add_argument("--top-k", type=validation.cli_sampling("top_k"), default=0)
    parser.add_argument("--seed", type=validation.cli_sampling("seed"), default=None)
    parser.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    parser.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    add_dtype_argument(parser)
    add_device_argument(parser)
    add_threads_argument(parser)
    add_runner_argument(parser)
    add_draft_length_argument(parser)
    parser.add_argument("--option", "-o", action="append", default=[], metavar="NAME=VALUE",
                        help="a method option, e.g. -o num_draft_tokens=8 (value parsed as JSON when possible)")
    parser.add_argument("--stats", action="store_true", help="print decode statistics to standard error")
    parser.add_argument("--json", action="store_true", help="print one JSON object with text, token ids and stats")
    parser.add_argument("--stream", action="store_true", help="print tokens as they are generated")
    parser.set_defaults(func=run_generate)

    methods = subparsers.add_parser("methods", help="list decoding methods and their options")
    methods.set_defaults(func=run_methods)


def parse_options(pairs: list[str], method: str = "") -> dict:
    """-o NAME=VALUE pairs, each value typed by the method row's spec of NAME (multidraft.method_options)."""
    from multidraft.methods import parse_cli_option
    options = {}
    for pair in pairs:
        if "=" not in pair:
            raise InvalidOptionError(f"method option {pair!r} must look like NAME=VALUE")
        name, value = pair.split("=", 1)
        validation.text(f"method option {name!r:.40}", pair, error=InvalidOptionError)
        name = name.strip().replace("-", "_")
        options[name] = parse_cli_option(method, name, value)
    return options


def read_stdin_prompt() -> str:
    """The whole of standard input as UTF-8 text; invalid UTF-8 is a PromptError, not a traceback."""
    if sys.stdin is None or sys.stdin.isatty():
        raise PromptError("no prompt given; pass it as an argument or pipe it on standard input")
    raw = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
    if isinstance(raw, str):
        return validation.text("standard input", raw)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PromptError(f"standard input is not valid UTF-8 (byte {raw[exc.start]:#04x} at offset {exc.start}); "
                          "send UTF-8 text") from None


def run_generate(args) -> int:
    import multidraft

    prompt = args.prompt
    if prompt is None or prompt == "-":
        prompt = read_stdin_prompt()
    else:
        validation.text("the prompt argument", prompt)   # invalid UTF-8 in argv arrives as lone surrogates
    if args.json and args.stream:
        raise InvalidOptionError("--json and --stream cannot go together (the streamed text would break the JSON "
                                 "on stdout); drop one of them")
    if prompt == "" and not args.chat:                   # refused before the model loads
        raise PromptError("the prompt is empty; give some text to continue")
    options = parse_options(args.option, args.method)
    dtype = dtype_choice(args.dtype)
    # One Request, validated before loading a model: method options, sampling parameters, stop strings, budget.
    request = multidraft.Request.build(prompt, args.method, max_new_tokens=args.max_new_tokens,
                                       temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                                       seed=args.seed, stop=args.stop, chat=args.chat or None,
                                       draft_length=args.draft_length, options=options)
    threads = measure_default_threads(args.threads)   # before loading: this process idles
    lm = multidraft.load_model(args.model, dtype=dtype, device=args.device, runner=args.runner)
    apply_for_model(lm, threads)
    if args.runner == "auto" and lm.device.type == "cpu" and lm.runner in ("eager", "fast") and _hf_model(args.model):
        print(f"multidraft: {args.model} runs its own fp32 weights on HF's modules; --runner native runs its matrices "
              "as Q8_0 blocks on the 8-bit kernels, several times faster a token on a CPU (a close model, not the same "
              "bits; quantized once, cached)", file=sys.stderr)

    streamer = TextStreamer(lm.decode, args.stop or ())   # the server's detokenizer: no half characters, no stop text

    def stream(token_id):
        sys.stdout.write(streamer.feed(token_id))
        sys.stdout.flush()

    result = multidraft.generate_request(lm, request, on_token=stream if args.stream else None)
    drafts = result.drafts or []
    if args.json:
        print(json.dumps({"text": result.text, "token_ids": result.token_ids, "stats": result.stats.to_dict(),
                          "drafts": [{"text": d.text, "token_ids": d.token_ids, "score": d.score} for d in drafts]}))
    elif args.stream:
        print(streamer.finish(result.text))
    elif len(drafts) > 1:
        for rank, draft in enumerate(drafts, 1):
            score = "" if draft.score is None else f" (score {draft.score:.3f})"
            print(f"--- draft {rank}{score} ---\n{draft.text}")
    else:
        print(result.text)
    if args.stats:
        print(result.stats.summary(), file=sys.stderr)
    return 0


def _hf_model(name) -> bool:
    """Whether `name` is an HF model (a folder or a cached id), not a GGUF-backed one."""
    from multidraft.errors import MultidraftError
    from multidraft.models.loader import resolve

    try:
        return resolve(name).is_hf
    except MultidraftError:                 # a model loaded by other means than its name (tests)
        return False


def run_methods(args) -> int:
    from multidraft.method_options import describe
    from multidraft.methods import available_methods
    for name, method in sorted(available_methods().items()):
        kind = "lossless" if method.lossless else "LOSSY"
        print(f"{name:16s} {kind:9s} {method.description}")
        for option, opt in method.specs.items():
            print(f"{'':26s}-o {option}=...  {describe(opt)}")
        if not method.specs:
            print(f"{'':26s}options: -")
    return 0
