"""Prometheus counters in the text exposition format (0.0.4), written by hand.

Speculative-decoding and token counters carry vLLM's names (`vllm:spec_decode_num_drafts_total`, ...), so
dashboards and scripts built for vLLM read them unchanged. Definitions follow vLLM's: a "draft" is one
verification step that had draft tokens; per-position counts are 0-based, by depth in the draft.
"""

from __future__ import annotations

import threading
from collections import defaultdict

from multidraft.types import DecodeStats

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)

# name -> (type, help)
FAMILIES = {
    "vllm:request_success_total": ("counter", "Finished choices, by finish reason (stop, length)."),
    "vllm:prompt_tokens_total": ("counter", "Prompt tokens processed."),
    "vllm:generation_tokens_total": ("counter", "Tokens generated."),
    "vllm:spec_decode_num_drafts_total": ("counter", "Verification steps that checked at least one draft token."),
    "vllm:spec_decode_num_draft_tokens_total": ("counter", "Draft tokens proposed."),
    "vllm:spec_decode_num_accepted_tokens_total": ("counter", "Draft tokens accepted."),
    "vllm:spec_decode_num_accepted_tokens_per_pos_total": ("counter", "Draft tokens accepted, by 0-based position in the draft."),
    "vllm:num_requests_running": ("gauge", "Requests the model is working on (0 or 1: one at a time)."),
    "vllm:num_requests_waiting": ("gauge", "Requests waiting in the queue."),
    "vllm:e2e_request_latency_seconds": ("histogram", "Seconds from arrival to the last token, for successful requests."),
    "multidraft:http_requests_total": ("counter", "HTTP requests answered, by path and status code."),
    "multidraft:requests_rejected_total": ("counter", "Requests refused with 429 because the queue was full."),
    "multidraft:requests_cancelled_total": ("counter", "Requests whose client disconnected before the end."),
    "multidraft:requests_timed_out_total": ("counter", "Requests stopped by the per-request timeout."),
    "multidraft:method_requests_total": ("counter", "Generation requests, by decoding method."),
}


def _escape(value) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: tuple) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in labels) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class Metrics:
    """Thread-safe counters. `render()` gives the /metrics page."""

    def __init__(self, model_name: str):
        self.model_name = model_name
        self._lock = threading.Lock()
        self._values: dict[str, dict[tuple, float]] = defaultdict(lambda: defaultdict(float))
        self._latency_counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self._latency_sum = 0.0
        self._gauges = {}

    def inc(self, name: str, amount: float = 1.0, **labels) -> None:
        key = tuple(sorted({"model_name": self.model_name, **labels}.items()))
        with self._lock:
            self._values[name][key] += amount

    def value(self, name: str, **labels) -> float:
        key = tuple(sorted({"model_name": self.model_name, **labels}.items()))
        with self._lock:
            return self._values[name].get(key, 0.0)

    def set_gauge_source(self, name: str, read) -> None:
        """Gauges are read at scrape time from a callable (queue length, running jobs)."""
        self._gauges[name] = read

    def observe_latency(self, seconds: float) -> None:
        with self._lock:
            index = next((i for i, bound in enumerate(LATENCY_BUCKETS) if seconds <= bound), len(LATENCY_BUCKETS))
            self._latency_counts[index] += 1
            self._latency_sum += seconds

    def record_generation(self, stats: DecodeStats, finish_reason: str, count_prompt: bool = True) -> None:
        """Count one generate() call: tokens and speculative-decoding work, with vLLM's definitions."""
        if count_prompt:
            self.inc("vllm:prompt_tokens_total", stats.prompt_tokens)
        self.inc("vllm:generation_tokens_total", stats.generated_tokens)
        if stats.draft_tokens_proposed:
            # Steps that proposed a depth-1 node are the steps that had a draft at all.
            drafts = stats.proposed_per_position[0] if stats.proposed_per_position else 0
            self.inc("vllm:spec_decode_num_drafts_total", drafts)
            self.inc("vllm:spec_decode_num_draft_tokens_total", stats.draft_tokens_proposed)
            self.inc("vllm:spec_decode_num_accepted_tokens_total", stats.draft_tokens_accepted)
            for position, accepted in enumerate(stats.accepted_per_position):
                self.inc("vllm:spec_decode_num_accepted_tokens_per_pos_total", accepted, position=str(position))

    def render(self) -> str:
        lines = []
        with self._lock:
            values = {name: dict(series) for name, series in self._values.items()}
            counts, total = list(self._latency_counts), self._latency_sum
        for name, (kind, help_text) in FAMILIES.items():
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            if kind == "gauge":
                read = self._gauges.get(name)
                lines.append(f"{name}{_labels((('model_name', self.model_name),))} {_number(read() if read else 0)}")
            elif kind == "histogram":
                base = (("model_name", self.model_name),)
                cumulative = 0
                for bound, count in zip(LATENCY_BUCKETS + (float("inf"),), counts):
                    cumulative += count
                    le = "+Inf" if bound == float("inf") else repr(bound)
                    lines.append(f"{name}_bucket{_labels(base + (('le', le),))} {cumulative}")
                lines.append(f"{name}_sum{_labels(base)} {_number(total)}")
                lines.append(f"{name}_count{_labels(base)} {cumulative}")
            else:
                series = values.get(name) or {}
                if not series and name.startswith("vllm:") and "per_pos" not in name and "success" not in name:
                    series = {(("model_name", self.model_name),): 0.0}     # show zero rather than nothing
                for labels, value in sorted(series.items()):
                    lines.append(f"{name}{_labels(labels)} {_number(value)}")
        return "\n".join(lines) + "\n"
