"""Checks for values that come from a user (library call, command line or HTTP request).

Every check returns the cleaned value or raises a `multidraft.errors` exception whose message names the
value, what was given and what is allowed, so the library, the CLI (one line, exit 2) and the server (a 400)
all say the same thing. Rules shared by every check:
- a bool is never an integer or a number (True would otherwise pass as 1);
- numbers must be finite (NaN and +-Infinity are refused everywhere);
- text must be valid Unicode: a lone surrogate (what Python makes of invalid UTF-8 in argv) is refused.
"""

from __future__ import annotations

import contextlib
import difflib
import math
import numbers
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

from multidraft.errors import InvalidOptionError, PromptError, ServerLimitError

# Sampling floors. Below MIN_TEMPERATURE the logits / temperature division overflows float32 for ordinary
# logits (1e-300 rounds to 0 in float32: inf / nan probabilities), and such a temperature is greedy in all but
# name, so it is refused with a pointer to temperature=0. top_p has no floor: any top_p > 0 keeps at least
# the most likely token (sampling.logits_to_probs), which is the limit of a tiny top_p.
MIN_TEMPERATURE = 1e-2
MIN_TOP_P = 1e-5                               # the server's floor (see SAMPLING_RULES)
SEED_RANGE = (-(2 ** 63), 2 ** 63 - 1)        # 64 bits signed: what torch.Generator.manual_seed accepts
BIG_INT = 1_000_000                            # a machine-sized bound for integers with no natural cap
CHAT_ROLES = ("system", "user", "assistant")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def did_you_mean(name, candidates: Iterable[str]) -> str:
    """' (did you mean 'x'?)' when a misspelled name is close to one of `candidates` (case and - vs _ aside)."""
    if not isinstance(name, str):
        return ""
    folded = {candidate.lower().replace("-", "_"): candidate for candidate in candidates}
    match = difflib.get_close_matches(name.lower().replace("-", "_"), list(folded), n=1)
    return f" (did you mean {folded[match[0]]!r}?)" if match else ""


def integer(name: str, value, *, minimum: Optional[int] = None, maximum: Optional[int] = None,
            allow_none: bool = False, hint: str = "") -> Optional[int]:
    """An int (not a bool, not 2.0) in [minimum, maximum]; None passes when allow_none."""
    if value is None and allow_none:
        return None
    if not _is_int(value) or (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise InvalidOptionError(f"{name} must be {_int_range(minimum, maximum)}{' or None' if allow_none else ''}"
                                 f"{hint}, got {value!r}")
    return int(value)


def _int_range(minimum, maximum) -> str:
    if minimum is not None and maximum is not None:
        return f"an integer in {minimum}..{maximum}"
    if minimum is not None:
        return f"an integer >= {minimum}"
    if maximum is not None:
        return f"an integer <= {maximum}"
    return "an integer"


def positive_int(name: str, value, allow_none: bool = False) -> Optional[int]:
    """The most common option type: an integer >= 1 (None passes when allow_none)."""
    return integer(name, value, minimum=1, allow_none=allow_none)


def number(name: str, value, *, minimum: Optional[float] = None, maximum: Optional[float] = None,
           above: Optional[float] = None, below: Optional[float] = None, allow_none: bool = False,
           hint: str = "") -> Optional[float]:
    """A finite real number (int or float, not a bool) with inclusive (minimum/maximum) or strict
    (above/below) bounds; returned as a float."""
    if value is None and allow_none:
        return None
    ok = _is_number(value) and math.isfinite(value)
    if ok:
        ok = ((minimum is None or value >= minimum) and (maximum is None or value <= maximum)
              and (above is None or value > above) and (below is None or value < below))
    if not ok:
        bounds = [f">= {minimum}" if minimum is not None else "", f"> {above}" if above is not None else "",
                  f"<= {maximum}" if maximum is not None else "", f"< {below}" if below is not None else ""]
        bounds_text = " and ".join(b for b in bounds if b)
        raise InvalidOptionError(f"{name} must be a finite number{' ' + bounds_text if bounds_text else ''}"
                                 f"{' or None' if allow_none else ''}{hint}, got {value!r}")
    return float(value)


def choice(name: str, value, choices: Iterable[Any], allow_none: bool = False):
    """One of `choices` (compared with ==; unhashable values are refused, not crashed on)."""
    choices = tuple(choices)
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not any(type(value) is type(c) and value == c for c in choices):
        raise InvalidOptionError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def boolean(name: str, value) -> bool:
    """True or False only (not 0/1, not "true")."""
    if not isinstance(value, bool):
        raise InvalidOptionError(f"{name} must be true or false, got {value!r}")
    return value


def callback(name: str, value, arguments: tuple, what: str):
    """None, or a function callable with `arguments` (placeholders of what it will get), else InvalidOptionError:
    a callback of the wrong arity fails here, not as a TypeError from inside the decoding loop."""
    import inspect

    if value is None:
        return None
    if not callable(value):
        raise InvalidOptionError(f"{name} must be {what}, got {type(value).__name__}")
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):        # some builtins and C callables have none: they are called as they are
        return value
    try:
        signature.bind(*arguments)
    except TypeError as error:
        raise InvalidOptionError(f"{name} must be {what}; {getattr(value, '__name__', type(value).__name__)}"
                                 f"{signature} cannot be called so ({error})") from None
    return value


# ---------------------------------------------------------------- a server's bounds


@dataclass(frozen=True)
class ServerBounds:
    """What one HTTP request may ask of a shared server, handed to the library's own checks (Request.build): the
    HTTP bounds of SAMPLING_RULES and of each option's spec (method_options.Opt) apply, and `caps` (a ServerConfig
    field -> its value: max_tokens, max_beams, ...) bound values from above. A message then adds where the bound
    comes from, so the one wording says what to do (`hint`)."""

    caps: Mapping[str, int] = field(default_factory=dict)

    def limit(self, cap: Optional[str]) -> Optional[int]:
        return None if cap is None else self.caps.get(cap)

    @staticmethod
    def hint(cap: Optional[str] = None) -> str:
        return f" (this server's limit: serve --{cap.replace('_', '-')})" if cap else " (this server's limit)"


# ---------------------------------------------------------------- sampling parameters: the one rule table


@dataclass(frozen=True)
class SamplingRule:
    """How one sampling parameter is checked, for the library, the CLIs and the server alike. The server adds only
    its HTTP bounds (http_low / http_high: what one request may ask of a shared machine)."""

    integer: bool
    low: Optional[float] = None      # inclusive
    above: Optional[float] = None    # strict lower bound
    high: Optional[float] = None
    floor: Optional[float] = None    # values in (0, floor) are refused: 0 or at least floor
    nullable: bool = False
    hint: str = ""
    http_low: Optional[float] = None
    http_high: Optional[float] = None
    why_http: str = ""


SAMPLING_RULES = {
    "temperature": SamplingRule(False, low=0.0, floor=MIN_TEMPERATURE, hint=" (0 means greedy)", http_high=100),
    # Any top_p > 0 keeps at least the most likely token (sampling.logits_to_probs); a request may not go under
    # MIN_TOP_P, where it rounds to 0 in float32 (top_k=1 is the way to ask for the top token only).
    "top_p": SamplingRule(False, above=0.0, high=1.0, hint=" (1 turns it off)", http_low=MIN_TOP_P,
                          why_http="smaller values round to 0 in float32; use top_k=1 for the top token only"),
    "top_k": SamplingRule(True, low=0, hint=" (0 turns it off)", http_high=BIG_INT),
    "seed": SamplingRule(True, low=SEED_RANGE[0], high=SEED_RANGE[1], nullable=True),
}


def sampling_value(name: str, value, http: bool = False):
    """`value` checked by SAMPLING_RULES[name] (with the server's bounds when `http`, the message then saying so).
    Returns it as a plain int / float (None for an unset seed); an error names the parameter (`param`)."""
    with past_cap(name, value, None):
        return _sampling_value(name, value, http)


def _sampling_value(name: str, value, http: bool):
    rule = SAMPLING_RULES[name]
    if rule.integer:
        value = integer(name, value, minimum=_int_bound(rule.low), maximum=_int_bound(rule.high),
                        allow_none=rule.nullable, hint=rule.hint)
    else:
        value = number(name, value, minimum=rule.low, above=rule.above, maximum=rule.high,
                       allow_none=rule.nullable, hint=rule.hint)
    if value is None:
        return None
    if rule.floor is not None and 0 < value < rule.floor:
        raise InvalidOptionError(f"{name} must be 0 (greedy) or at least {rule.floor:g}, got {value!r}; a smaller "
                                 f"{name} is greedy decoding in all but name (use {name}=0)")
    if http and ((rule.http_low is not None and value < rule.http_low)
                 or (rule.http_high is not None and value > rule.http_high)):
        low = _fmt_bound(rule.http_low if rule.http_low is not None else rule.low)
        high = _fmt_bound(rule.http_high if rule.http_high is not None else rule.high)
        why = f"; {rule.why_http}" if rule.why_http else ""
        raise InvalidOptionError(f"{name} must be between {low} and {high} ({ServerBounds.hint().strip(' ()')}"
                                 f"{why}), got {value!r}")
    return value


def _int_bound(bound):
    return None if bound is None else int(bound)


def _fmt_bound(bound) -> str:
    return "-inf" if bound is None else f"{bound:g}"


def temperature(value, method: str = "") -> float:
    """0 (greedy) or a finite temperature >= MIN_TEMPERATURE."""
    return sampling_value("temperature", value)


def top_p(value) -> float:
    return sampling_value("top_p", value)


def top_k(value) -> int:
    return sampling_value("top_k", value)


def seed(value) -> Optional[int]:
    """None (a random seed) or an integer that fits in 64 bits signed."""
    return sampling_value("seed", value)


def nth_seed(seed: int, index: int) -> int:
    """The seed of the index-th of several runs (the server's n choices): seed + index, wrapped into SEED_RANGE
    so that every seed a request may give has n successors."""
    low, high = SEED_RANGE
    return (seed + index - low) % (high - low + 1) + low


def max_new_tokens(value, bounds: Optional[ServerBounds] = None) -> int:
    """An integer >= 1; with a server's `bounds`, at most its cap max_tokens."""
    cap = None if bounds is None else bounds.limit("max_tokens")
    if cap is None:
        return integer("max_new_tokens", value, minimum=1)
    with past_cap("max_new_tokens", value, cap):
        return integer("max_new_tokens", value, minimum=1, maximum=cap, hint=ServerBounds.hint("max_tokens"))


@contextlib.contextmanager
def past_cap(name: str, value, cap: Optional[float]):
    """Re-raise a refusal of `value` as ServerLimitError when `value` passed everything but the server's `cap`, and
    name the option (`param`) either way."""
    try:
        yield
    except InvalidOptionError as exc:
        over = cap is not None and _is_number(value) and math.isfinite(value) and value > cap
        raise (ServerLimitError if over else InvalidOptionError)(str(exc), param=name) from None


def stop_strings(value) -> list[str]:
    """None, a string, or a list of strings (each non-empty, valid Unicode)."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(s, str) for s in items):
        raise InvalidOptionError(f"stop must be a string or a list of strings, got {value!r}")
    for item in items:
        if not item:
            raise InvalidOptionError("stop strings must not be empty")
        text("stop string", item, error=InvalidOptionError)
    return list(items)


# ---------------------------------------------------------------- prompts


def text(name: str, value: str, error=PromptError) -> str:
    """`value` unchanged, or `error` when it holds a lone surrogate (invalid UTF-8 smuggled through
    surrogateescape, or a JSON "\\ud800" escape): tokenizers cannot encode those."""
    bad = _SURROGATE.search(value)
    if bad:
        where = bad.start()
        raise error(f"{name} is not valid Unicode text: lone surrogate {bad.group()!r} at character {where} "
                    "(invalid UTF-8 input?); send UTF-8 text")
    return value


def chat_roles(tokenizer=None) -> tuple[str, ...]:
    """Roles a chat message may have: system, user, assistant, plus 'tool' when the chat template handles it."""
    template = getattr(tokenizer, "chat_template", None)
    template = template if isinstance(template, str) else ""
    if re.search(r"""['"]tool['"]""", template):
        return CHAT_ROLES + ("tool",)
    return CHAT_ROLES


def messages(value: Sequence, tokenizer=None) -> list[dict]:
    """A non-empty list of {"role": ..., "content": str} dicts with known roles and valid text."""
    if not isinstance(value, (list, tuple)) or not value:
        raise PromptError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    roles = chat_roles(tokenizer)
    for index, message in enumerate(value):
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise PromptError(f"message {index} must be a {{'role': ..., 'content': ...}} dict, got {message!r:.80}")
        if message["role"] not in roles:
            raise PromptError(f"message {index} has role {message['role']!r:.40}; the roles this model's chat "
                              f"template takes are: {', '.join(roles)}")
        if not isinstance(message["content"], str):
            raise PromptError(f"message {index} content must be a string, got {type(message['content']).__name__}")
        text(f"message {index} content", message["content"])
    return list(value)


def token_ids(value: Sequence, vocab_size: int) -> list[int]:
    """Token ids as ints in [0, vocab_size); bools and out-of-range ids (2**63, -1) are refused."""
    ids = []
    for index, token in enumerate(value):
        if not _is_int(token) or not 0 <= token < vocab_size:
            raise PromptError(f"token id {token!r:.40} at position {index} is outside the vocabulary "
                              f"(ids are integers 0..{vocab_size - 1})")
        ids.append(int(token))
    return ids


def is_token_id_list(value) -> bool:
    """A non-empty list of integer-like items (bools included, so that they are refused rather than re-read)."""
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(t, numbers.Integral) for t in value)


def prompt(value, vocab_size: int, tokenizer=None):
    """Check a prompt as `generate` takes it: text, chat messages, or token ids. Returns it cleaned."""
    if isinstance(value, str):
        return text("the prompt", value)
    if is_token_id_list(value):
        return token_ids(value, vocab_size)
    if isinstance(value, (list, tuple)) and not value:
        raise PromptError("the prompt is empty: it holds no token ids and no chat messages")
    if isinstance(value, (list, tuple)) and not any(isinstance(item, dict) for item in value):
        raise PromptError(_neither_ids_nor_messages(value))
    if isinstance(value, (list, tuple)):
        return messages(value, tokenizer)
    raise not_a_prompt(value)


def not_a_prompt(value) -> PromptError:
    """The error for a prompt of a type generate() does not take (a tensor or an array: its .tolist() is)."""
    return PromptError(f"a prompt must be text, a list of chat messages or a list of token ids, not "
                       f"{type(value).__name__}{'; pass ids.tolist()' if hasattr(value, 'tolist') else ''}")


def _neither_ids_nor_messages(value: Sequence) -> str:
    if all(isinstance(item, str) for item in value):
        return ("a list of strings is several prompts: generate() takes one (a string); for many, use "
                "multidraft.generate_batch(lm, prompts)")
    index, item = next((i, t) for i, t in enumerate(value) if not isinstance(t, numbers.Integral))
    return (f"a list prompt holds token ids (integers) or chat messages ({{'role': ..., 'content': ...}} dicts); "
            f"item {index} is {item!r:.40} ({type(item).__name__})")


# ---------------------------------------------------------------- command line (argparse types)


def _argparse_type(check, type_name: str):
    """Wrap a check as an argparse `type=`: a bad value becomes argparse's own one-line usage error."""
    import argparse

    def convert(raw: str):
        try:
            return check(raw)
        except (InvalidOptionError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = type_name
    return convert


def cli_int(minimum: Optional[int] = None, maximum: Optional[int] = None, name: str = "value"):
    """argparse type: an integer in [minimum, maximum]."""
    def check(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise InvalidOptionError(f"{name} must be {_int_range(minimum, maximum)}, got {raw!r}") from None
        return integer(name, value, minimum=minimum, maximum=maximum)
    return _argparse_type(check, "integer")


def cli_sampling(name: str):
    """argparse type for a sampling parameter (--temperature, --top-p, --top-k, --seed): SAMPLING_RULES[name]."""
    rule = SAMPLING_RULES[name]

    def check(raw: str):
        if rule.integer:
            try:
                value = int(raw)
            except ValueError:
                raise InvalidOptionError(f"{name} must be an integer, got {raw!r}") from None
        else:
            value = _float(raw, name)
        return sampling_value(name, value)
    return _argparse_type(check, name)


def _float(raw: str, name: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise InvalidOptionError(f"{name} must be a number, got {raw!r}") from None


def check_port(value) -> int:
    """argparse type (and plain check) for a TCP port: an integer in 1..65535; refused before anything loads."""
    if isinstance(value, str):
        return _argparse_type(lambda r: integer("port", _port_int(r), minimum=1, maximum=65535), "port")(value)
    return integer("port", value, minimum=1, maximum=65535)


def _port_int(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise InvalidOptionError(f"port must be an integer in 1..65535, got {raw!r}") from None
