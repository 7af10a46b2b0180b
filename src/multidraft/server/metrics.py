"""The server's Prometheus metrics, kept and exposed by prometheus_client (text format 0.0.4).

Speculative-decoding and token counters carry vLLM's names (`vllm:spec_decode_num_drafts_total`, ...), so
dashboards and scripts built for vLLM read them unchanged. Definitions follow vLLM's: a "draft" is one
verification step that had draft tokens; per-position counts are 0-based, by depth in the draft.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from multidraft.types import DecodeStats

disable_created_metrics()      # like vLLM's page: no *_created series beside the counters

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)

# name -> (type, help, labels besides model_name)
FAMILIES = {
    "vllm:request_success_total": ("counter", "Finished choices, by finish reason (stop, length).",
                                   ("finished_reason",)),
    "vllm:prompt_tokens_total": ("counter", "Prompt tokens processed.", ()),
    "vllm:generation_tokens_total": ("counter", "Tokens generated.", ()),
    "vllm:spec_decode_num_drafts_total": ("counter", "Verification steps that checked at least one draft token.",
                                          ()),
    "vllm:spec_decode_num_draft_tokens_total": ("counter", "Draft tokens proposed.", ()),
    "vllm:spec_decode_num_accepted_tokens_total": ("counter", "Draft tokens accepted.", ()),
    "vllm:spec_decode_num_accepted_tokens_per_pos_total": (
        "counter", "Draft tokens accepted, by 0-based position in the draft.", ("position",)),
    "vllm:num_requests_running": ("gauge", "Requests the model is working on (at most 1 unless serve "
                                  "--max-num-seqs batches them).", ()),
    "vllm:num_requests_waiting": ("gauge", "Requests waiting in the queue.", ()),
    "multidraft:batch_size": ("gauge", "Generations in the last batched step's forward (serve --max-num-seqs).", ()),
    "multidraft:kv_slots_used": ("gauge", "KV positions reserved by running generations (of --max-batched-tokens).",
                                 ()),
    "vllm:e2e_request_latency_seconds": ("histogram", "Seconds from arrival to the last token, for successful "
                                         "requests.", ()),
    "multidraft:http_requests_total": ("counter", "HTTP requests answered, by path and status code.",
                                       ("path", "status")),
    "multidraft:requests_rejected_total": ("counter", "Requests refused with 429 because the queue was full.", ()),
    "multidraft:requests_cancelled_total": ("counter", "Requests whose client disconnected before the end.", ()),
    "multidraft:requests_timed_out_total": ("counter", "Requests stopped by the per-request timeout.", ()),
    "multidraft:suffix_store_bytes": ("gauge", "Bytes held by the suffix stores of method 'suffix' (automata and "
                                      "token arrays).", ()),
    "multidraft:suffix_store_tokens": ("gauge", "Tokens kept in the suffix stores of method 'suffix'.", ()),
    "multidraft:prefix_cache_bytes": ("gauge", "Bytes of keys/values held by the prefix cache (serve "
                                      "--prefix-cache-mb).", ()),
    "multidraft:prefix_cache_tokens": ("gauge", "Positions held by the prefix cache.", ()),
    "multidraft:prefix_cache_hit_tokens": ("gauge", "Prompt positions read from the prefix cache since the start "
                                           "(not prefilled).", ()),
    "multidraft:method_requests_total": ("counter", "Generation requests, by decoding method.", ("method",)),
}


class Metrics:
    """The metrics of one server (its own registry, so several apps in one process never mix their counts).
    prometheus_client's metrics are thread-safe. `render()` gives the /metrics page."""

    def __init__(self, model_name: str):
        self.model_name = model_name
        self.registry = CollectorRegistry()
        self._families = {}
        for name, (kind, help_text, labels) in FAMILIES.items():
            labelnames = ("model_name",) + labels
            if kind == "counter":       # prometheus_client appends _total to a counter's name itself
                family = Counter(name.removesuffix("_total"), help_text, labelnames, registry=self.registry)
            elif kind == "gauge":
                family = Gauge(name, help_text, labelnames, registry=self.registry)
            else:
                family = Histogram(name, help_text, labelnames, buckets=LATENCY_BUCKETS, registry=self.registry)
            self._families[name] = family
            if not labels and (kind != "counter" or name.startswith("vllm:")):
                family.labels(model_name=model_name)     # vLLM's series show zero rather than nothing

    def _series(self, name: str, labels: dict):
        return self._families[name].labels(model_name=self.model_name, **labels)

    def inc(self, name: str, amount: float = 1.0, **labels) -> None:
        self._series(name, labels).inc(amount)

    def value(self, name: str, **labels) -> float:
        value = self.registry.get_sample_value(name, {"model_name": self.model_name, **labels})
        return 0.0 if value is None else value

    def set_gauge_source(self, name: str, read) -> None:
        """Gauges are read at scrape time from a callable (queue length, running jobs)."""
        self._series(name, {}).set_function(read)

    def observe_latency(self, seconds: float) -> None:
        self._series("vllm:e2e_request_latency_seconds", {}).observe(seconds)

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
        return generate_latest(self.registry).decode("utf-8")


class _Families:
    """A collector that yields fixed metric families (what merge_pages built)."""

    def __init__(self, families):
        self.families = list(families)

    def collect(self):
        return iter(self.families)


def merge_pages(pages: dict[str, str], label: str = "replica", drop: tuple = (), extra: list = ()) -> str:
    """One Prometheus page from several servers' pages: each series keeps its labels and gains `label`=its page's
    key, so every replica's counter stays a counter (a replica that leaves takes its series with it; `sum by` adds
    them up). Families named in `drop` (their names as on the page) are left out; `extra` families (prometheus_client
    Metric objects) are added as they are."""
    merged: dict[str, Metric] = {}
    for key, text in pages.items():
        for family in text_string_to_metric_families(text):
            if family.name in drop or f"{family.name}_total" in drop:
                continue
            into = merged.get(family.name)
            if into is None:
                into = merged[family.name] = Metric(family.name, family.documentation, family.type)
            into.samples += [s._replace(labels={**s.labels, label: key}) for s in family.samples]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families([*extra, *merged.values()]))
    return generate_latest(registry).decode("utf-8")
