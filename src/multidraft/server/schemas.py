"""Request bodies (validated strictly: "10" is not an integer) and OpenAI's error shape.

Fields a request may carry beyond these are method options (`{"method": "pld", "max_ngram": 4}`), the way
vLLM takes extra parameters; the method itself rejects names it does not know.
"""

from __future__ import annotations

import json
from typing import Optional, Union

from pydantic import BaseModel, ConfigDict, ValidationError

# OpenAI parameters this server does not implement: a clear refusal instead of "unknown method option".
# Each maps to the values that mean "off" and are therefore accepted.
UNSUPPORTED_FIELDS: dict[str, tuple] = {
    "logprobs": (None, False, 0), "top_logprobs": (None, 0), "echo": (None, False), "suffix": (None, ""),
    "best_of": (None, 1), "logit_bias": (None, {}), "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0), "tools": (None, []), "tool_choice": (None, "none", "auto"),
    "functions": (None, []), "function_call": (None, "none", "auto"), "response_format": (None, {"type": "text"}),
    "parallel_tool_calls": (None, True, False), "audio": (None,), "modalities": (None, ["text"]),
    "prediction": (None,), "reasoning_effort": (None,), "logprobs_mode": (None,),
    "store": (None, False),          # keeping completions: not done here (and never the suffix method's store)
}
# OpenAI bookkeeping fields with no effect here: accepted in OpenAI's shape (then dropped), refused otherwise, so a
# value meant for something else (`"store": "/etc/passwd"`, a method option misspelt into one) is never silently lost.
IGNORED_FIELDS = {
    "user": ("a string", lambda v: v is None or isinstance(v, str)),
    "metadata": ("an object of strings", lambda v: v is None or (isinstance(v, dict) and all(
        isinstance(x, str) for x in v.values()))),
    "service_tier": ("'auto' or 'default' (this server has one tier)", lambda v: v in (None, "auto", "default")),
}


class ApiError(Exception):
    """An error answered in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, message: str, param: Optional[str] = None, code: Optional[str] = None,
                 error_type: Optional[str] = None):
        message = _shortened(message)
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param if param is None or len(param) <= 100 else param[:100] + "..."
        self.code = code
        self.error_type = error_type or _error_type(status)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param, "code": self.code}}


MAX_MESSAGE_CHARS = 1000


def _shortened(message: str) -> str:
    """A message that quotes a huge value from the request (a 900 kB method name) keeps its start and its end, which
    says what to do, instead of echoing the whole body back."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    cut = len(message) - 800
    return f"{message[:500]}... [{cut} characters cut] ...{message[-300:]}"


def _error_type(status: int) -> str:
    """OpenAI's error types: the client's fault is an invalid request (401, 405, 413, 415 included)."""
    if status == 404:
        return "not_found_error"
    if status == 429:
        return "rate_limit_error"
    if status == 504:
        return "timeout_error"
    return "invalid_request_error" if 400 <= status < 500 else "server_error"


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number (numbers must be finite)")


def _encodable(value) -> bool:
    """False when a string inside `value` holds a lone surrogate, which no tokenizer can encode."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class _Sampling(_Strict):
    model: Optional[str] = None
    max_tokens: Optional[int] = None
    temperature: Optional[float] = None
    top_p: float = 1.0
    top_k: int = 0
    n: int = 1
    stop: Union[str, list[str], None] = None
    stream: bool = False
    stream_options: Optional[dict] = None
    seed: Optional[int] = None
    method: Optional[str] = None


class CompletionRequest(_Sampling):
    prompt: Union[str, list[str], list[int], list[list[int]]]


class ChatMessage(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    role: str
    content: Union[str, list[dict], None] = None
    name: Optional[str] = None

    def text(self) -> str:
        """The message text; OpenAI's list-of-parts form is joined (text parts only)."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, "only text content parts ({'type': 'text', 'text': ...}) are supported",
                               param="messages")
            parts.append(part["text"])
        return "".join(parts)


class ChatRequest(_Sampling):
    messages: list[ChatMessage]
    max_completion_tokens: Optional[int] = None


# Fields that take several shapes: pydantic names only the first shape it tried ("'prompt.str': Input should be a
# valid string" for a list of floats), so the message names them all.
UNION_SHAPES = {"prompt": "a string, a list of strings, a list of token ids or a list of token-id lists",
                "stop": "a string or a list of strings",
                "content": "a string, null or a list of text parts ({'type': 'text', 'text': ...})"}
# A field of the other endpoint: said so, instead of "method 'greedy' has no option 'prompt'".
OTHER_ENDPOINT = {"CompletionRequest": {"messages": "/v1/chat/completions takes 'messages'; /v1/completions takes "
                                                    "'prompt'",
                                        "max_completion_tokens": "/v1/completions takes 'max_tokens'"},
                  "ChatRequest": {"prompt": "/v1/completions takes 'prompt'; /v1/chat/completions takes 'messages'"}}
JSON_TYPES = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number",
              bool: "a boolean", type(None): "null"}


def parse_body(raw: bytes, model_cls: type[_Strict]) -> _Strict:
    """Bytes -> a validated request, or ApiError(400) saying what is wrong and where."""
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError, RecursionError) as exc:
        if "digits" in str(exc):      # Python's advice for it (sys.set_int_max_str_digits) is not the client's
            raise ApiError(400, "the request body holds a number of over 4300 digits, which no field takes") from None
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, f"the request body must be a JSON object, not {JSON_TYPES.get(type(data), 'that')}")
    for name, hint in OTHER_ENDPOINT.get(model_cls.__name__, {}).items():
        if name in data:
            raise ApiError(400, f"'{name}' is not a field of this endpoint: {hint}", param=name)
    for key, value in data.items():
        if not _encodable(key) or not _encodable(value):
            raise ApiError(400, f"'{key[:40] if _encodable(key) else 'body'}' holds a lone surrogate (an unpaired "
                                f"\\ud800-\\udfff escape), which is not text; send valid UTF-16 pairs",
                           param=key if _encodable(key) else None)
    try:
        request = model_cls.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first["loc"]
        union = next((i for i, part in enumerate(loc[:-1]) if part in UNION_SHAPES and isinstance(loc[i + 1], str)),
                     None)
        where = ".".join(str(part) for part in (loc if union is None else loc[:union + 1])) or "body"
        problem = first["msg"] if union is None else f"it must be {UNION_SHAPES[loc[union]]}"
        if first["type"] == "missing":
            problem = "this field is required"
        got = f" (got {json.dumps(first['input'])[:80]})" if first["type"] != "missing" and "input" in first else ""
        raise ApiError(400, f"invalid value for '{where}': {problem}{got}", param=str(first["loc"][0])) from None
    options = request.stream_options
    if options is not None and (not request.stream or set(options) - {"include_usage"}
                                or not all(isinstance(v, bool) for v in options.values())):
        # as OpenAI and vLLM: only with a stream, and no option this server would silently not honour
        raise ApiError(400, f"'stream_options' is {{\"include_usage\": true or false}}, and only with \"stream\": "
                            f"true; got {json.dumps(options)[:80]}{'' if request.stream else ' without a stream'}",
                       param="stream_options")
    for name in list(request.model_extra or {}):
        value = request.model_extra[name]
        if name in IGNORED_FIELDS:
            shape, accepted = IGNORED_FIELDS[name]
            if not accepted(value):
                raise ApiError(400, f"'{name}' must be {shape}; got {json.dumps(value)[:60]}", param=name)
            request.model_extra.pop(name)
        elif name in UNSUPPORTED_FIELDS:
            if not any(value is off or (type(value) is type(off) and value == off) for off in UNSUPPORTED_FIELDS[name]):
                raise ApiError(400, f"'{name}' is not supported by this server", param=name)
            request.model_extra.pop(name)
    return request
