"""`multidraft serve`: load a model and serve the OpenAI-compatible API and the autocomplete page."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import fields
from pathlib import Path

from multidraft.errors import MultidraftError
from multidraft.decoders.draft_length import add_draft_length_argument
from multidraft.models.runner_choice import add_dtype_argument, add_runner_argument, dtype_choice
from multidraft.models.device import add_device_argument
from multidraft.models.threads import add_threads_argument, measure_default_threads
from multidraft.server.config import ARTIFACT_KINDS, LOCAL_HOSTS, ServerConfig
from multidraft.server.ray_cli import add_ray_arguments, check_ray_flags, run_on_ray, spec_from_args

API_KEY_ENV = "MULTIDRAFT_API_KEY"
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
# Flags that set a ServerConfig field of the same meaning: flag dest -> field.
LIMIT_FLAGS = {"max_queue": "max_queue", "max_prompt_tokens": "max_prompt_tokens", "max_tokens": "max_tokens",
               "max_n": "max_n", "timeout": "request_timeout", "read_timeout": "read_timeout",
               "method": "default_method",
               "suggestions": "suggestions", "max_body_bytes": "max_body_bytes", "max_beams": "max_beams",
               "max_draft_tokens": "max_draft_tokens", "max_drafts": "max_drafts",
               "max_tree_tokens": "max_tree_tokens", "max_lattice_k": "max_lattice_k",
               "suffix_store_tokens": "suffix_store_tokens", "suffix_isolation": "suffix_isolation",
               "suffix_store_path": "suffix_store_path", "prefix_cache_mb": "prefix_cache_mb",
               "max_num_seqs": "max_num_seqs", "max_batched_tokens": "max_batched_tokens",
               "prefill_chunk": "prefill_chunk"}


class ServeError(MultidraftError):
    """`multidraft serve` cannot start (port in use, bad config file, missing artifact)."""


def register(subparsers) -> None:
    defaults = ServerConfig()
    parser = subparsers.add_parser(
        "serve", help="serve a model over an OpenAI-compatible HTTP API with an autocomplete page",
        description="Serve MODEL on /v1/completions and /v1/chat/completions (OpenAI-compatible; `method` and method "
                    "options go in the request body), /v1/models, /health, Prometheus /metrics, and an "
                    "autocomplete page at /. Up to --max-num-seqs generations share each model forward "
                    "(continuous batching); others wait in a bounded queue. "
                    "Files and models are chosen here, never by a request: requests name them (README: Security).")
    parser.add_argument("--model", default="qwen2.5-coder-1.5b", help="registry alias, HF folder, GGUF file or cached HF id")
    parser.add_argument("--draft", default=None, help="draft model for methods that take one (same tokenizer as --model)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--config", default=None, metavar="FILE",
                        help="JSON file with server settings (ServerConfig field names, e.g. max_beams, allowed_hosts, "
                             "artifacts: {ngram: {NAME: PATH}, heads: {...}, rescorer: {...}}); flags override it")
    parser.add_argument("--method", default=None, help=f"method for requests that name none (default {defaults.default_method})")
    add_dtype_argument(parser)
    add_device_argument(parser)
    add_threads_argument(parser)
    add_runner_argument(parser)
    add_draft_length_argument(parser)
    parser.add_argument("--max-queue", type=int, default=None,
                        help=f"requests that may wait for the model; more get 429 (default {defaults.max_queue})")
    parser.add_argument("--max-prompt-tokens", type=int, default=None, help=f"default {defaults.max_prompt_tokens}")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help=f"largest max_tokens a request may ask (default {defaults.max_tokens})")
    parser.add_argument("--max-n", type=int, default=None, help=f"largest n a request may ask (default {defaults.max_n})")
    parser.add_argument("--timeout", type=float, default=None,
                        help=f"seconds a request may take, queueing included (default {defaults.request_timeout:g})")
    parser.add_argument("--read-timeout", type=float, default=None,
                        help=f"seconds a connection has to send a request's headers, then its body; idle or "
                             f"trickling connections are closed (default {defaults.read_timeout:g})")
    parser.add_argument("--suggestions", type=int, default=None, help=f"k on the page (default {defaults.suggestions})")
    _add_batching_and_limits(parser, defaults)
    _add_access_and_artifacts(parser, defaults)
    add_ray_arguments(parser)
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.set_defaults(func=run_serve)


def _add_batching_and_limits(parser, defaults: ServerConfig) -> None:
    batching = parser.add_argument_group("continuous batching (many requests, one forward per step)")
    batching.add_argument("--max-num-seqs", type=int, default=None,
                          help=f"generations decoded together (default {defaults.max_num_seqs}; 1 runs one request "
                               "at a time)")
    batching.add_argument("--max-batched-tokens", type=int, default=None,
                          help=f"KV positions held for all running generations together; a generation is admitted "
                               f"when its prompt + max_tokens fit (default {defaults.max_batched_tokens})")
    batching.add_argument("--prefill-chunk", type=int, default=None,
                          help=f"prompt tokens read per step beside running generations (default "
                               f"{defaults.prefill_chunk})")
    limits = parser.add_argument_group("per-request work limits")
    limits.add_argument("--max-body-bytes", type=int, default=None, help=f"default {defaults.max_body_bytes}")
    limits.add_argument("--max-beams", type=int, default=None, help=f"num_beams (default {defaults.max_beams})")
    limits.add_argument("--max-draft-tokens", type=int, default=None,
                        help=f"num_draft_tokens (default {defaults.max_draft_tokens})")
    limits.add_argument("--max-drafts", type=int, default=None,
                        help=f"n x num_drafts, num_paths (default {defaults.max_drafts})")
    limits.add_argument("--max-tree-tokens", type=int, default=None,
                        help=f"tokens in one draft tree or lattice (default {defaults.max_tree_tokens})")
    limits.add_argument("--max-lattice-k", type=int, default=None, help=f"default {defaults.max_lattice_k}")


def _add_access_and_artifacts(parser, defaults: ServerConfig) -> None:
    access = parser.add_argument_group("access")
    access.add_argument("--api-key", action="append", default=None, metavar="KEY",
                        help=f"require `Authorization: Bearer KEY` on /v1/* (default: ${API_KEY_ENV} if set); "
                             f"repeat it to give each client its own key")
    access.add_argument("--allowed-hosts", action="append", default=None, metavar="NAMES",
                        help="comma-separated Host names to answer besides localhost, 127.0.0.1, [::1] and --host "
                             "(* = any: only behind a proxy that checks Host)")
    access.add_argument("--allowed-origins", action="append", default=None, metavar="ORIGINS",
                        help="comma-separated origins (https://app.example) whose pages may call the API (CORS); "
                             "default none: same-origin only")
    artifacts = parser.add_argument_group("artifacts requests may name")
    artifacts.add_argument("--ngram", action="append", default=[], metavar="NAME=PATH", help="an n-gram file")
    artifacts.add_argument("--heads", action="append", default=[], metavar="NAME=PATH", help="trained blockwise heads")
    artifacts.add_argument("--rescorer", action="append", default=[], metavar="NAME=MODEL",
                           help="a rescoring model for blockwise rescoring='neural' (loaded at start)")
    parser.add_argument("--suffix-store-tokens", type=int, default=None,
                        help=f"tokens of earlier requests method 'suffix' keeps to draft from (default {defaults.suffix_store_tokens})")
    parser.add_argument("--suffix-isolation", action="store_true", default=None,
                        help="keep one suffix store per API key, so one client's text never drafts for another "
                             "(needs --api-key twice or more: one key per client)")
    parser.add_argument("--suffix-store-path", default=None, metavar="DIR",
                        help="keep the suffix store(s) in this folder across restarts: read at start (a damaged file "
                             "stops the start with an error), written atomically every "
                             "minute while requests change them and at shutdown. The files hold served text")
    parser.add_argument("--prefix-cache-mb", type=int, default=None, metavar="MB",
                        help="keep up to MB megabytes of earlier requests' keys/values, so a prompt that starts "
                             "the same way (an agent's next step, a chat's next turn) skips that part of its "
                             "prefill; same tokens, bit for bit. Needs --runner quantized-q8 (default 0: off)")


def build_config(args) -> ServerConfig:
    """ServerConfig from the config file (if any), then the flags given, then the defaults."""
    values: dict = _read_config_file(args.config) if args.config else {}
    for flag, name in LIMIT_FLAGS.items():
        if getattr(args, flag, None) is not None:
            values[name] = getattr(args, flag)
    if args.api_key is not None:
        if any(not key for key in args.api_key):
            raise ServeError("--api-key is empty (an unset variable?); give a key, or leave the flag out to serve "
                             "without authentication")
        values["api_key"] = args.api_key[0] if len(args.api_key) == 1 else tuple(args.api_key)
    elif os.environ.get(API_KEY_ENV) is not None:
        if not os.environ[API_KEY_ENV]:
            raise ServeError(f"${API_KEY_ENV} is set but empty; give it a key, or unset it to serve without "
                             f"authentication")
        values["api_key"] = os.environ[API_KEY_ENV]
    hosts = list(values.get("allowed_hosts", LOCAL_HOSTS))
    if args.host not in WILDCARD_HOSTS:
        hosts.append(f"[{args.host}]" if ":" in args.host else args.host)
    hosts += [h for item in args.allowed_hosts or [] for h in item.split(",")]
    values["allowed_hosts"] = tuple(dict.fromkeys(h.strip().lower() for h in hosts if h.strip()))
    origins = list(values.get("allowed_origins", ()))
    origins += [o for item in args.allowed_origins or [] for o in item.split(",")]
    values["allowed_origins"] = tuple(origins)
    named = {kind: dict(v) for kind, v in (values.get("artifacts") or {}).items()}
    for kind in ("ngram", "heads", "rescorer"):
        for item in getattr(args, kind):
            name, sep, value = item.partition("=")
            if not sep or not name or not value:
                raise ServeError(f"--{kind} takes NAME=VALUE, got {item!r}")
            named.setdefault(kind, {})[name] = value
    values["artifacts"] = named
    try:
        config = ServerConfig(**values)
    except TypeError as exc:
        raise ServeError(f"bad server setting: {exc}") from None
    return config.validate()


def _read_config_file(path: str) -> dict:
    try:
        data = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ServeError(f"cannot read the server config file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ServeError(f"the server config file {path} must hold a JSON object")
    known = {f.name for f in fields(ServerConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ServeError(f"the server config file {path} has unknown settings {unknown}; known: {sorted(known)}")
    for name in ("allowed_hosts", "allowed_origins"):
        if name in data:
            if not isinstance(data[name], list) or not all(isinstance(x, str) for x in data[name]):
                raise ServeError(f"{name} in {path} must be a list of strings")
            data[name] = tuple(data[name])
    artifacts = data.get("artifacts", {})
    if not isinstance(artifacts, dict) or not all(
            kind in ARTIFACT_KINDS and isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
            for kind, v in artifacts.items()):
        raise ServeError(f"artifacts in {path} must map a kind ({', '.join(ARTIFACT_KINDS)}) to {{NAME: PATH or MODEL}}")
    return data


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind and listen now, before any model loads: a port in use is one clear line, not a late traceback."""
    if not 0 <= port <= 65535:
        raise ServeError(f"--port must be between 0 and 65535, got {port}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (is another server running there? "
                         f"choose another --port)") from None
    sock.set_inheritable(True)
    return sock


def _check_artifact_paths(config: ServerConfig) -> None:
    """Every named file exists and is what its kind says (header checks), so an operator's bad file stops the
    start with one line instead of failing each request that names it."""
    for kind in ("ngram", "heads"):
        for name, path in (config.artifacts.get(kind) or {}).items():
            resolved = Path(path).expanduser()
            if not resolved.is_file():
                raise ServeError(f"--{kind} {name}={path}: no such file")
            try:
                if kind == "ngram":
                    from multidraft.ngram.fileformat import read_header
                    read_header(resolved)
                else:
                    from multidraft.blockwise.heads_store import read_meta
                    read_meta(resolved)
            except MultidraftError as exc:
                raise ServeError(f"--{kind} {name}={path}: {exc}") from None
            config.artifacts[kind][name] = str(resolved.resolve())


def serve_config(args) -> ServerConfig:
    """The checked ServerConfig of `serve`'s flags: method, files and --ray settings fail here, before any model loads."""
    from multidraft.methods import get_method

    config = build_config(args)
    config.draft_length = args.draft_length
    get_method(config.default_method)
    _check_artifact_paths(config)
    check_ray_flags(args, config)
    return config


def _warn_if_open(host: str, config: ServerConfig) -> None:
    if host not in ("127.0.0.1", "::1", "localhost") and not config.api_keys:
        print("multidraft: warning: listening beyond loopback without --api-key; anyone who can reach this port "
              "can use the model (README: Security)", flush=True)


def run_serve(args) -> int:
    import uvicorn

    from multidraft.heap import freeze_loaded_heap
    from multidraft.server.app import create_app
    from multidraft.server.connections import uvicorn_config
    from multidraft.server.loading import load_served

    config = serve_config(args)
    if args.ray:
        if args.ray_address is None:
            bind_socket(args.host, args.port).close()     # a port in use: one line now, not after the models load
        _warn_if_open(args.host, config)
        return run_on_ray(args, config)
    sock = bind_socket(args.host, args.port)
    try:
        threads = measure_default_threads(args.threads)   # before loading: this process idles
        lm, draft_lm, config = load_served(config, args.model, draft=args.draft, dtype=dtype_choice(args.dtype),
                                           device=args.device, runner=args.runner, threads=threads)
        app = create_app(lm, config, draft_lm=draft_lm)
        freeze_loaded_heap()                              # the models stay until exit: no collection walks them
        port = sock.getsockname()[1]
        print(f"multidraft: serving {lm.name} on http://{args.host}:{port}/ (page at /, API at /v1)", flush=True)
        _warn_if_open(args.host, config)
        server = uvicorn.Server(uvicorn_config(app, log_level=args.log_level))
        server.run(sockets=[sock])
    finally:
        sock.close()
    return 0


def ray_app(args: dict):
    """The Ray Serve application builder that deploy/serve.yaml names (`serve run` / `serve deploy`): `args` holds
    `flags`, the `multidraft serve` flags as one string or a list (--ray is implied; the proxy's host and port are
    the YAML's http_options). Files named there must be at the same path, same bytes, on every node
    (server/shipping.py); `multidraft serve --ray` ships them itself."""
    import argparse
    import shlex

    from multidraft.server.ray_deployment import application

    flags = (args or {}).get("flags", "")
    argv = shlex.split(flags) if isinstance(flags, str) else [str(flag) for flag in flags]
    parser = argparse.ArgumentParser(prog="multidraft")
    register(parser.add_subparsers())
    parsed = parser.parse_args(["serve", *argv, "--ray"])
    return application(spec_from_args(parsed, serve_config(parsed)))
