"""One request, built and validated once: what `generate()`, the CLIs, the bench and the server all construct.

A `Request` holds the prompt (text, chat messages or token ids), the method that runs and its options (resolved
by the method row: defaults filled in, every option checked), the sampling parameters (checked by the one rule
table, multidraft.validation.SAMPLING_RULES), stop strings, the token budget, the draft-length mode and the seed.
Every rule that turns a user's arguments into what runs lives here, once:
- temperature defaults to 1.0 for method "sample" and 0 for every other method;
- "greedy" with a temperature > 0 runs plain sampling, and the request says "sample";
- "sample" needs a temperature > 0, and a greedy-only method (blockwise) a temperature of 0.
A request is immutable and holds no model and no loaded artifact, so many can exist at once (the server's n
choices, a batch); `with_seed` gives a copy for another choice. Bind it to a model with `prompt_ids(lm)`.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, Union

from multidraft import validation
from multidraft.decoders.draft_length import DEFAULT_MODE as DEFAULT_DRAFT_LENGTH, check_mode as check_draft_length
from multidraft.errors import InvalidOptionError
from multidraft.methods import Method, get_method
from multidraft.sampling import SamplingParams

Prompt = Union[str, list, tuple]


@dataclass(frozen=True)
class Request:
    prompt: Prompt
    method: str
    options: dict[str, Any] = field(default_factory=dict)
    params: SamplingParams = SamplingParams()
    max_new_tokens: int = 128
    stop: tuple[str, ...] = ()
    chat: Optional[bool] = None
    draft_length: str = DEFAULT_DRAFT_LENGTH

    @classmethod
    def build(cls, prompt: Prompt, method: str = "greedy", *, max_new_tokens: int = 128,
              temperature: Optional[float] = None, top_p: float = 1.0, top_k: int = 0, seed: Optional[int] = None,
              stop: Union[str, Sequence[str], None] = None, chat: Optional[bool] = None,
              draft_length: Optional[str] = None, options: Optional[dict[str, Any]] = None,
              bounds: Optional[validation.ServerBounds] = None) -> "Request":
        """Check everything that needs no model; raises a MultidraftError subclass naming the bad value. `bounds`: a
        server's (an HTTP request): the same checks within its HTTP bounds and caps too (the sampling parameters
        then named as its fields; a value past a cap raises errors.ServerLimitError)."""
        if not isinstance(method, str):
            raise InvalidOptionError(f"method must be a method name (see multidraft.available_methods()), "
                                     f"got {method!r}")
        row = get_method(method)
        if options is not None and not isinstance(options, Mapping):
            raise InvalidOptionError(f"options must be a dict of method options (name -> value), got {options!r:.80}")
        resolved = row.resolve_options(dict(options or {}), bounds, BUILD_ARGUMENTS)
        if temperature is None:
            temperature = 1.0 if method == "sample" else 0.0
        params = SamplingParams(temperature, top_k, top_p, seed).validate(bounds is not None)
        if method == "sample" and params.greedy:
            raise InvalidOptionError("method='sample' needs temperature > 0; use method='greedy' for temperature 0")
        if row.greedy_only and not params.greedy:
            raise InvalidOptionError(f"method={method!r} verifies by greedy matching; use temperature=0")
        if method == "greedy" and not params.greedy:
            method = "sample"          # "greedy" names the plain decoder; with a temperature it samples, and says so
        if chat is not None and not isinstance(chat, bool):
            raise InvalidOptionError(f"chat must be true, false or None (automatic), got {chat!r}")
        if chat and isinstance(prompt, (list, tuple)) and prompt and all(isinstance(t, int) for t in prompt):
            raise InvalidOptionError("chat=True applies the chat template to text or messages; token ids are the "
                                     "prompt as it is (encode with lm.encode(text, chat=True), or drop chat=True)")
        draft_length = DEFAULT_DRAFT_LENGTH if draft_length is None else draft_length
        check_draft_length(draft_length)
        return cls(_prompt_shape(prompt), method, resolved, params, validation.max_new_tokens(max_new_tokens, bounds),
                   tuple(validation.stop_strings(stop)), chat, draft_length)

    @property
    def row(self) -> Method:
        return get_method(self.method)

    @property
    def greedy(self) -> bool:
        return self.params.greedy

    def with_seed(self, seed: Optional[int]) -> "Request":
        """The same request with another seed (the server's n choices: seed, seed + 1, ...)."""
        params = dataclasses.replace(self.params, seed=validation.seed(seed))
        return dataclasses.replace(self, params=params)

    def with_options(self, **options) -> "Request":
        """The same request with some options replaced (checked again by the row)."""
        given = {**self.options, **options}
        return dataclasses.replace(self, options=self.row.resolve_options(given))

    def encode(self, lm) -> list[int]:
        """The prompt's token ids for `lm`, checked against its vocabulary and its chat template's roles."""
        prompt = validation.prompt(self.prompt, lm.vocab_size, getattr(lm, "tokenizer", None))
        return lm.encode(prompt, chat=self.chat)

    def prompt_ids(self, lm) -> list[int]:
        """encode(lm), and room in the context for the prompt and max_new_tokens."""
        ids = self.encode(lm)
        lm.check_prompt_length(len(ids), self.max_new_tokens)
        return ids


# Request.build's own parameters: generate() passes every other keyword as a method option, so a misspelled one
# (max_tokens, temprature) is refused as an option, with the parameter it resembles named.
BUILD_ARGUMENTS = tuple(name for name in inspect.signature(Request.build).parameters
                        if name not in ("prompt", "options", "bounds"))


def _prompt_shape(prompt):
    """Text (valid Unicode), token ids, or chat messages; the checks that need the model (vocabulary, the chat
    template's roles) come in prompt_ids()."""
    if isinstance(prompt, str):
        return validation.text("the prompt", prompt)
    if isinstance(prompt, (list, tuple)):
        return list(prompt)
    raise validation.not_a_prompt(prompt)
