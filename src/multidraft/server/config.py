"""Server limits, defaults and trust settings, shared by the app, the worker and the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

# Host names a browser uses for this machine. A request whose Host header is anything else was sent to a
# name that merely resolves here (DNS rebinding), unless the operator lists that name (--allowed-hosts).
LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")
ARTIFACT_KINDS = ("ngram", "heads", "rescorer", "draft_model")


@dataclass
class ServerConfig:
    max_queue: int = 16               # requests waiting for the model (beyond the one running); more -> 429
    max_prompt_tokens: int = 4096     # per prompt, after tokenisation / chat templating
    max_tokens: int = 512             # upper bound on a request's max_tokens
    max_n: int = 8                    # upper bound on a request's n (choices per prompt)
    max_prompts: int = 8              # upper bound on the number of prompts in one /v1/completions request
    request_timeout: float = 120.0    # seconds from arrival (queueing included) to the last token
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
    api_key: Optional[str] = None     # when set, /v1/* needs `Authorization: Bearer <key>`
    allowed_hosts: tuple = LOCAL_HOSTS   # Host header names accepted; "*" accepts any
    allowed_origins: tuple = ()       # cross-origin callers allowed by CORS; "*" allows any; () = same origin only
    # Server-side artifacts a request may name: kind -> {name: value}. Values are paths or loaded objects
    # the operator chose (`multidraft serve --ngram NAME=PATH ...`); requests only ever send the name.
    artifacts: dict[str, dict[str, Any]] = field(default_factory=dict)
    suffix_store_tokens: int = 200_000  # tokens the cross-request store of method "suffix" keeps (per API key)
    suffix_isolation: bool = False    # one suffix store per API key instead of one for all requests
    draft_length: str = "fixed"       # every request's draft-length mode (serve --draft-length)

    def validate(self) -> "ServerConfig":
        from multidraft.errors import InvalidOptionError
        for name in ("max_queue", "max_prompt_tokens", "max_tokens", "max_n", "max_prompts", "suggestions",
                     "suggestion_tokens", "default_max_tokens", "max_body_bytes", "max_beams", "max_draft_tokens",
                     "max_drafts", "max_tree_tokens", "max_lattice_k", "suffix_store_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidOptionError(f"server option {name} must be a positive integer, got {value!r}")
        if not isinstance(self.request_timeout, (int, float)) or not 0 < self.request_timeout < float("inf"):
            raise InvalidOptionError(f"request timeout must be > 0 seconds, got {self.request_timeout!r}")
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key.strip()
                                         or not self.api_key.isprintable()):
            raise InvalidOptionError("the API key must be a non-empty printable string")
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
