"""Server limits and defaults, shared by the app, the worker and the CLI."""

from __future__ import annotations

from dataclasses import dataclass


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
    suffix_store_tokens: int = 200_000  # tokens the cross-request store of method "suffix" keeps (per API key)
    suffix_isolation: bool = False    # one suffix store per API key instead of one for all requests

    def validate(self) -> "ServerConfig":
        from multidraft.errors import InvalidOptionError
        for name in ("max_queue", "max_prompt_tokens", "max_tokens", "max_n", "max_prompts", "suggestions",
                     "suggestion_tokens", "default_max_tokens", "suffix_store_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InvalidOptionError(f"server option {name} must be a positive integer, got {value!r}")
        if not self.request_timeout > 0:
            raise InvalidOptionError(f"request timeout must be > 0 seconds, got {self.request_timeout!r}")
        return self
