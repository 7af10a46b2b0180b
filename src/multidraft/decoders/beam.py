"""Beam search: its own decoder (a batch of beams), not a draft-and-verify loop."""

from __future__ import annotations

import time

import torch

from multidraft.decoders.output import OutputCollector
from multidraft.sampling import check_finite
from multidraft.types import DecodeStats


@torch.inference_mode()
def beam_search(lm, prompt_ids: list[int], num_beams: int, length_penalty: float, output: OutputCollector,
                stats: DecodeStats) -> list[tuple[list[int], float]]:
    """Standard beam search (batch of `num_beams`, one forward per step). Returns all finished hypotheses,
    best first, as (token ids, length-normalised log-probability); `output` receives the best one."""
    started = time.perf_counter()
    cache = lm.new_cache(dynamic=True)          # a batch of beams: HF's cache (the static one holds one sequence)
    forward_output = lm.forward(cache, prompt_ids, logits_rows=slice(-1, None))
    stats.prefill_time = forward_output.seconds
    stats.target_calls += 1
    log_probs = forward_output.logits[-1].log_softmax(-1)
    scores, tokens = log_probs.topk(num_beams)
    beams = [[int(t)] for t in tokens.tolist()]
    beam_scores = scores.clone()                 # on the model's device, for the next step's sums
    host_scores = beam_scores.tolist()           # the same numbers on the host, for the stopping rule
    cache.hf_cache.batch_repeat_interleave(num_beams)
    finished: list[tuple[list[int], float]] = []
    eos = lm.eos_token_ids
    max_new = output.max_new_tokens

    def normalised(score, length):
        return float(score) / (length ** length_penalty)

    alive = list(range(num_beams))
    # Beams whose first token is EOS finish at once.
    for i in list(alive):
        if beams[i][-1] in eos:
            finished.append((beams[i], normalised(host_scores[i], 1)))
    step = 1
    while step < max_new:
        live = [i for i in range(len(beams)) if beams[i][-1] not in eos]
        if not live:
            break
        if len(finished) >= num_beams:
            best_alive = max(normalised(host_scores[i], step) for i in live)
            worst_kept = sorted((s for _, s in finished), reverse=True)[num_beams - 1]
            if best_alive <= worst_kept:
                break
        input_ids = torch.tensor([[b[-1]] for b in beams], device=lm.device)
        t0 = time.perf_counter()
        logits = lm.call_model(input_ids=input_ids, past_key_values=cache.hf_cache, use_cache=True).logits[:, -1].float()
        stats.verify_time += time.perf_counter() - t0
        stats.target_calls += 1
        check_finite(logits)
        step_log_probs = logits.log_softmax(-1)
        # Finished (EOS) beams stay in the batch but may not extend.
        dead = torch.tensor([b[-1] in eos for b in beams], device=logits.device)
        total = beam_scores[:, None] + step_log_probs
        total[dead] = float("-inf")
        new_beams, new_scores, origin = _extend(total, beams, num_beams, eos, finished, normalised)
        if not new_beams:
            break
        # The scores go back to the logits' device: a CPU tensor here crashed the next step's sum on CUDA.
        beams, host_scores = new_beams, new_scores
        beam_scores = torch.tensor(new_scores, dtype=step_log_probs.dtype, device=step_log_probs.device)
        cache.hf_cache.reorder_cache(torch.tensor(origin, device=lm.device))
        step += 1
    for beam, score in zip(beams, host_scores):
        if beam[-1] not in eos and score != float("-inf"):
            finished.append((beam, normalised(score, len(beam))))
    unique = _ranked_unique(finished)
    best = unique[0][0]
    output.add(best)
    stats.verification_calls = stats.target_calls
    output.finalize(stats, started)
    return unique[:num_beams]


def _extend(total, beams, num_beams: int, eos, finished: list, normalised):
    """The best `num_beams` extensions of the beams by `total` [beams, vocab] (an EOS extension goes to `finished`),
    padded with -inf copies so the batch keeps its size: (beams, scores, the beam each came from)."""
    top_scores, top_flat = total.flatten().topk(2 * num_beams)
    vocab = total.shape[1]
    new_beams, new_scores, origin = [], [], []
    for score, flat in zip(top_scores.tolist(), top_flat.tolist()):
        if score == float("-inf"):
            break
        source, token = divmod(flat, vocab)
        candidate = beams[source] + [token]
        if token in eos:
            finished.append((candidate, normalised(score, len(candidate))))
            continue
        new_beams.append(candidate)
        new_scores.append(score)
        origin.append(source)
        if len(new_beams) == num_beams:
            break
    while new_beams and len(new_beams) < num_beams:
        new_beams.append(new_beams[-1])
        new_scores.append(float("-inf"))
        origin.append(origin[-1])
    return new_beams, new_scores, origin


def _ranked_unique(finished: list) -> list:
    """Finished hypotheses best first, each token sequence once."""
    finished.sort(key=lambda item: -item[1])
    unique, seen = [], set()
    for beam, score in finished:
        if tuple(beam) not in seen:
            seen.add(tuple(beam))
            unique.append((beam, score))
    return unique
