"""Server limits, defaults and trust settings, shared by the app, the worker and the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

from multidraft.decoders.draft_length import DEFAULT_MODE as DEFAULT_DRAFT_LENGTH
from multidraft.validation import ServerBounds

# Host names a browser uses for this machine. A request whose Host header is anything else was sent to a
# name that merely resolves here (DNS rebinding), unless the operator lists that name (--allowed-hosts).
LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")
ARTIFACT_KINDS = ("ngram", "heads", "rescorer", "draft_model")
# The fields that cap a request's values (max_tokens; the option specs' `cap`s): handed to the library's checks.
CAPS = ("max_tokens", "max_beams", "max_draft_tokens", "max_drafts", "max_tree_tokens", "max_lattice_k")


@dataclass
class ServerConfig:
    max_queue: int = 16               # requests waiting for the model (beyond the one running); more -> 429
    max_prompt_tokens: int = 4096     # per prompt, after tokenisation / chat templating
    max_tokens: int = 512             # upper bound on a request's max_tokens
    max_n: int = 8                    # upper bound on a request's n (choices per prompt)
    max_prompts: int = 8              # upper bound on the number of prompts in one /v1/completions request
    request_timeout: float = 120.0    # seconds from arrival (queueing included) to the last token
    read_timeout: float = 10.0        # seconds a connection has to send a request's headers, then its body
    default_method: str = "greedy"    # method when a request names none
    default_max_tokens: int = 16      # OpenAI's default for /v1/completions
    suggestions: int = 3              # k on the autocomplete page
    suggestion_tokens: int = 12       # max_tokens per suggestion on the page
    model_name: str = ""              # id shown in /v1/models; defaults to the model's name
    # Work one request may ask for (each bounds the memory and the time of one model step).
    max_body_bytes: int = 1 << 20     # request body; larger -> 413 before it is read whole
    max_beams: int = 16               # num_beams (beam, mtad)
    max_draft_tokens: int = 64        # num_draft_tokens, short_draft_tokens: depth of a draft
    max_drafts: int = 32              # n x num_drafts (multi_draft), num_paths (blockwise)
    max_tree_tokens: int = 256        # tokens in one draft tree/lattice: drafts x depth, beams x depth, K candidates
    max_lattice_k: int = 64           # blockwise lattice width per head
    # Who may call (see README "Security").
    # When set, /v1/* needs `Authorization: Bearer <key>`. Several keys (a tuple): one per client, each accepted;
    # they are what suffix_isolation tells clients apart by.
    api_key: Union[None, str, tuple] = None
    allowed_hosts: tuple = LOCAL_HOSTS   # Host header names accepted; "*" accepts any
    allowed_origins: tuple = ()       # cross-origin callers allowed by CORS; "*" allows any; () = same origin only
    # Server-side artifacts a request may name: kind -> {name: value}. Values are paths or loaded objects
    # the operator chose (`multidraft serve --ngram NAME=PATH ...`); requests only ever send the name.
    artifacts: dict[str, dict[str, Any]] = field(default_factory=dict)
    suffix_store_tokens: int = 200_000  # tokens the cross-request store of method "suffix" keeps (per API key)
    suffix_isolation: bool = False    # one suffix store per API key instead of one for all requests (needs 2+ keys)
    suffix_store_path: Optional[str] = None   # folder the suffix stores persist in across restarts (None: memory only)
    prefix_cache_mb: int = 0          # keys/values of earlier requests reused by prompts sharing their start (0: off)
    draft_length: str = DEFAULT_DRAFT_LENGTH   # every request's draft-length mode (serve --draft-length)
    # Continuous batching (multidraft.engine): up to max_num_seqs generations share each target forward; 1 runs
    # one request at a time. On by default, as in vLLM: a lone request is a batch of one, and concurrent ones
    # share each forward (8 concurrent pld requests finished 1.6-2.8x sooner than one at a time, same texts).
    # max_batched_tokens: KV positions held for all of them together (the arena; bounds memory); prefill_chunk:
    # prompt rows read per step beside the generations already running.
    max_num_seqs: int = 8
    max_batched_tokens: int = 16384
    prefill_chunk: int = 256

    def bounds(self) -> ServerBounds:
        """What the library's checks bound a request's values by (Request.build): the caps above, by field name."""
        return ServerBounds({name: getattr(self, name) for name in CAPS})

    @property
    def api_keys(self) -> tuple:
        """Every accepted key (empty: no authentication)."""
        if self.api_key is None:
            return ()
        return (self.api_key,) if isinstance(self.api_key, str) else tuple(self.api_key)

    def validate(self) -> "ServerConfig":
        from multidraft.errors import InvalidOptionError
        for name in ("max_queue", "max_prompt_tokens", "max_tokens", "max_n", "max_prompts", "suggestions",
                     "suggestion_tokens", "default_max_tokens", "max_body_bytes", "max_beams", "max_draft_tokens",
                     "max_drafts", "max_tree_tokens", "max_lattice_k", "suffix_store_tokens", "max_num_seqs",
                     "max_batched_tokens", "prefill_chunk"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidOptionError(f"server option {name} must be a positive integer, got {value!r}")
        if isinstance(self.prefix_cache_mb, bool) or not isinstance(self.prefix_cache_mb, int) or self.prefix_cache_mb < 0:
            raise InvalidOptionError(f"server option prefix_cache_mb must be an integer >= 0, got {self.prefix_cache_mb!r}")
        if self.prefix_cache_mb and self.suffix_isolation:
            raise InvalidOptionError("--prefix-cache-mb shares one cache between clients (a client could time "
                                     "whether another sent a prompt), which --suffix-isolation rules out: drop one")
        if not isinstance(self.request_timeout, (int, float)) or not 0 < self.request_timeout < float("inf"):
            raise InvalidOptionError(f"request timeout must be > 0 seconds, got {self.request_timeout!r}")
        if not isinstance(self.read_timeout, (int, float)) or not 0 < self.read_timeout < float("inf"):
            raise InvalidOptionError(f"read timeout must be > 0 seconds, got {self.read_timeout!r}")
        if isinstance(self.api_key, list):
            self.api_key = tuple(self.api_key)
        if self.api_key is not None and not isinstance(self.api_key, (str, tuple)):
            raise InvalidOptionError("the API key must be a string (or a list of strings, one per client)")
        if self.api_key == ():
            raise InvalidOptionError("the list of API keys is empty; give at least one, or none to run without")
        for key in self.api_keys:
            check_api_key(key)
        if len(self.api_keys) > 1:
            self.api_key = tuple(dict.fromkeys(self.api_keys))
        if self.suffix_isolation and len(set(self.api_keys)) < 2:
            # Isolation can only separate clients the server can tell apart: by key. Without authentication a
            # client could send any bearer string (and two sending the same placeholder would share a store); with
            # one key every client is the same one.
            raise InvalidOptionError("suffix isolation keeps one suffix store per API key, so it needs one key per "
                                     "client: give --api-key two or more times (with no key or one key, every "
                                     "client would share one store)")
        if self.suffix_store_path is not None and (not isinstance(self.suffix_store_path, str)
                                                   or not self.suffix_store_path.strip()):
            raise InvalidOptionError(f"the suffix store path must be a folder path, got {self.suffix_store_path!r}")
        self.allowed_hosts = tuple(h.strip().lower() for h in self.allowed_hosts if h.strip())
        self.allowed_origins = tuple(o.strip().rstrip("/").lower() for o in self.allowed_origins if o.strip())
        for origin in self.allowed_origins:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise InvalidOptionError(f"allowed origin {origin!r} must look like https://host[:port] (or be *)")
        for kind, named in self.artifacts.items():
            if kind not in ARTIFACT_KINDS:
                raise InvalidOptionError(f"unknown artifact kind {kind!r}; the kinds are {', '.join(ARTIFACT_KINDS)}")
            for name in named:
                if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_." for c in name):
                    raise InvalidOptionError(f"artifact name {name!r} ({kind}) must use letters, digits, '-', '_' "
                                             f"and '.' only")
        return self


def check_api_key(key) -> None:
    """An API key must be non-empty printable ASCII without surrounding spaces: HTTP headers carry bytes, and a
    non-ASCII key would match only for clients that happen to send the same encoding (OpenAI's client refuses it)."""
    from multidraft.errors import InvalidOptionError
    if not isinstance(key, str) or not key:
        raise InvalidOptionError("an API key is empty (an unset variable?); give a key, or none to run without one")
    if not key.isascii() or not key.isprintable() or key != key.strip():
        raise InvalidOptionError("an API key must be printable ASCII without spaces at either end (e.g. "
                                 "`openssl rand -hex 24`)")
