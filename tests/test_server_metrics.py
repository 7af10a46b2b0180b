"""The /metrics page: vLLM's metric names and definitions, exposed through prometheus_client and readable by
Prometheus' own parser."""

from prometheus_client.parser import text_string_to_metric_families

from multidraft.server.metrics import FAMILIES, Metrics
from multidraft.types import DecodeStats


def samples(text: str) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_generation_counts_use_vllm_names_and_definitions():
    metrics = Metrics("tiny")
    stats = DecodeStats(method="pld")
    stats.prompt_tokens, stats.generated_tokens = 7, 5
    stats.draft_tokens_proposed, stats.draft_tokens_accepted = 6, 3
    stats.proposed_per_position, stats.accepted_per_position = [3, 2, 1], [2, 1, 0]
    metrics.record_generation(stats, "length")
    metrics.inc("vllm:request_success_total", finished_reason="length")
    metrics.set_gauge_source("vllm:num_requests_waiting", lambda: 2)
    metrics.observe_latency(0.3)
    page = samples(metrics.render())
    tiny = (("model_name", "tiny"),)
    assert page[("vllm:prompt_tokens_total", tiny)] == 7 and page[("vllm:generation_tokens_total", tiny)] == 5
    assert page[("vllm:spec_decode_num_drafts_total", tiny)] == 3            # steps with a depth-1 draft node
    assert page[("vllm:spec_decode_num_draft_tokens_total", tiny)] == 6
    assert page[("vllm:spec_decode_num_accepted_tokens_total", tiny)] == 3
    per_position = [page[("vllm:spec_decode_num_accepted_tokens_per_pos_total", tiny + (("position", str(i)),))]
                    for i in range(3)]
    assert per_position == [2, 1, 0]
    assert page[("vllm:request_success_total", (("finished_reason", "length"),) + tiny)] == 1
    assert page[("vllm:num_requests_waiting", tiny)] == 2 and page[("vllm:num_requests_running", tiny)] == 0
    assert page[("vllm:e2e_request_latency_seconds_count", tiny)] == 1
    assert page[("vllm:e2e_request_latency_seconds_bucket", (("le", "0.5"),) + tiny)] == 1
    assert page[("vllm:e2e_request_latency_seconds_bucket", (("le", "0.25"),) + tiny)] == 0
    assert metrics.value("vllm:prompt_tokens_total") == 7
    assert not any(name.endswith("_created") for name, _ in page)


def test_every_family_is_on_the_page_and_servers_keep_their_own_counts():
    first, second = Metrics("a"), Metrics("b")
    first.inc("multidraft:requests_rejected_total")
    text = first.render()
    for name, (kind, _, _) in FAMILIES.items():
        assert f"# TYPE {name} {kind}" in text
    assert samples(text)[("multidraft:requests_rejected_total", (("model_name", "a"),))] == 1
    assert second.value("multidraft:requests_rejected_total") == 0
