"""`multidraft serve`: load a model and serve the OpenAI-compatible API and the autocomplete page."""

from __future__ import annotations

from multidraft.models.device import add_device_argument
from multidraft.server.config import ServerConfig


def register(subparsers) -> None:
    defaults = ServerConfig()
    parser = subparsers.add_parser(
        "serve", help="serve a model over an OpenAI-compatible HTTP API with an autocomplete page",
        description="Serve MODEL on /v1/completions and /v1/chat/completions (OpenAI-compatible; `method` and method "
                    "options go in the request body), /v1/models, /health, Prometheus /metrics, and an "
                    "autocomplete page at /. One request runs at a time; others wait in a bounded queue.")
    parser.add_argument("--model", default="qwen2.5-coder-1.5b", help="registry alias, HF folder, GGUF file or cached HF id")
    parser.add_argument("--draft", default=None, help="draft model for methods that take one (same tokenizer as --model)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--method", default=defaults.default_method, help="method for requests that name none")
    parser.add_argument("--dtype", choices=["auto", "bfloat16", "float32"], default="auto")
    add_device_argument(parser)
    parser.add_argument("--max-queue", type=int, default=defaults.max_queue,
                        help="requests that may wait for the model; more get 429 (default %(default)s)")
    parser.add_argument("--max-prompt-tokens", type=int, default=defaults.max_prompt_tokens)
    parser.add_argument("--max-tokens", type=int, default=defaults.max_tokens, help="largest max_tokens a request may ask")
    parser.add_argument("--max-n", type=int, default=defaults.max_n, help="largest n a request may ask")
    parser.add_argument("--timeout", type=float, default=defaults.request_timeout,
                        help="seconds a request may take, queueing included (default %(default)s)")
    parser.add_argument("--suggestions", type=int, default=defaults.suggestions, help="k on the page")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.set_defaults(func=run_serve)


def run_serve(args) -> int:
    import torch
    import uvicorn

    import multidraft
    from multidraft.methods import get_method
    from multidraft.server.app import create_app

    config = ServerConfig(max_queue=args.max_queue, max_prompt_tokens=args.max_prompt_tokens,
                          max_tokens=args.max_tokens, max_n=args.max_n, request_timeout=args.timeout,
                          default_method=args.method, suggestions=args.suggestions).validate()
    get_method(args.method)                       # fail fast, before loading a model
    dtype = {"auto": None, "bfloat16": torch.bfloat16, "float32": torch.float32}[args.dtype]
    lm = multidraft.load_model(args.model, dtype=dtype, device=args.device)
    draft_lm = multidraft.load_model(args.draft, dtype=dtype, device=args.device) if args.draft else None
    app = create_app(lm, config, draft_lm=draft_lm)
    print(f"multidraft: serving {lm.name} on http://{args.host}:{args.port}/ (page at /, API at /v1)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0
