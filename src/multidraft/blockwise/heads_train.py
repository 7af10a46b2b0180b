"""Train heads 2..h on cached hidden states of the frozen base, within a wall-clock budget, resumably.

Loss (bpd.md §4.1): sum over heads of cross-entropy, head i at position s predicting position s+i.
Labels: `base` (default) = the base model's own greedy token for that position given the corpus prefix,
`corpus` = the corpus token itself. BPD only ever accepts the base's greedy tokens, so distilling the
base's choices is what raises block efficiency (Medusa-2's self-distillation argument); `corpus` is the
paper's objective. A checkpoint (heads, optimizer, step, elapsed time, curve) is written every
`checkpoint_seconds`; rerunning the same command resumes from it, and a larger --minutes trains on.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from multidraft.errors import InvalidOptionError
from multidraft.fsutil import atomic_path
from multidraft.blockwise.heads import BlockwiseHeads
from multidraft.blockwise.heads_store import save_heads

IGNORE = -100


@dataclass
class TrainConfig:
    num_heads: int = 4
    ffn_size: int = 0              # 0: the base's FFN size (bpd.md A15)
    shortlist_size: int = 8192     # 0: the whole vocabulary
    labels: str = "base"
    lr: float = 1e-3
    batch_size: int = 256
    minutes: float = 15.0
    seed: int = 0
    val_fraction: float = 0.05
    eval_seconds: float = 30.0
    checkpoint_seconds: float = 60.0
    max_steps: int = 0             # 0: no limit (tests use a few steps)

    def validate(self):
        if self.num_heads < 2:
            raise InvalidOptionError(f"--num-heads must be >= 2 (head 1 is the base's own), got {self.num_heads}")
        if self.labels not in ("base", "corpus"):
            raise InvalidOptionError(f"labels must be 'base' or 'corpus', got {self.labels!r}")
        if self.minutes <= 0 and self.max_steps <= 0:
            raise InvalidOptionError("--minutes must be > 0")
        return self


def make_targets(data: dict, num_heads: int, labels: str) -> np.ndarray:
    """[N, num_heads-1] token targets; head i at row r targets position r+i (IGNORE past a sequence end)."""
    n = len(data["tokens"])
    seq = data["seq_ids"]
    out = np.full((n, num_heads - 1), IGNORE, dtype=np.int64)
    for i in range(2, num_heads + 1):
        src_row = np.arange(n) + (i - 1 if labels == "base" else i)
        ok = src_row < n
        ok[ok] &= seq[src_row[ok]] == seq[ok]
        source = data["argmax"] if labels == "base" else data["tokens"]
        out[ok, i - 2] = source[src_row[ok]]
    return out


def pick_shortlist(data: dict, vocab_size: int, size: int) -> Optional[torch.Tensor]:
    """The `size` most frequent target tokens (base predictions and corpus tokens), sorted by id."""
    if size <= 0 or size >= vocab_size:
        return None
    counts = np.bincount(np.concatenate([data["argmax"], data["tokens"]]).astype(np.int64), minlength=vocab_size)
    top = np.argsort(-counts, kind="stable")[:size]
    return torch.as_tensor(np.sort(top), dtype=torch.long)


def train_heads(lm, data: dict, config: TrainConfig, out_path, checkpoint_path=None, log=print,
                **meta) -> dict:
    """Train, checkpointing as it goes; write the heads file, the curve PNG and JSON. Returns the history."""
    config.validate()
    torch.manual_seed(config.seed)
    out_path = Path(out_path)
    checkpoint_path = Path(checkpoint_path or out_path.with_suffix(".ckpt"))
    ffn = config.ffn_size or int(getattr(lm.config, "intermediate_size", 4 * lm.hidden_size))
    shortlist = pick_shortlist(data, lm.vocab_size, config.shortlist_size)
    heads = BlockwiseHeads(config.num_heads, lm.hidden_size, ffn, shortlist).bind(lm)
    column = torch.full((lm.vocab_size,), IGNORE, dtype=torch.long)
    column[heads.token_ids] = torch.arange(len(heads.token_ids))
    targets = torch.as_tensor(make_targets(data, config.num_heads, config.labels))
    targets = torch.where(targets >= 0, column[targets.clamp(min=0)], IGNORE)
    hidden = torch.as_tensor(data["hidden"])       # stays on the host; each batch goes to the heads' device
    device = heads.w1.device
    # Hold out whole sequences (the last ones) for validation.
    seq = data["seq_ids"]
    cut = np.quantile(np.unique(seq), 1 - config.val_fraction)
    val_rows = torch.as_tensor(np.flatnonzero(seq > cut))[:2048]
    train_rows = torch.as_tensor(np.flatnonzero(seq <= cut))
    optimizer = torch.optim.AdamW(heads.parameters(), lr=config.lr, weight_decay=0.0)
    history = {"config": asdict(config), "step": [], "train_loss": [], "val_step": [], "val_loss": [],
               "val_acc": [], "seconds": [], "train_rows": len(train_rows), "val_rows": len(val_rows),
               "shortlist_coverage": float((targets >= 0).float().mean())}
    step, elapsed = 0, 0.0
    if checkpoint_path.exists():
        blob = torch.load(checkpoint_path, map_location="cpu", weights_only=False)
        if _same_run(blob["config"], asdict(config)):
            heads.load_state_dict(blob["heads"])
            optimizer.load_state_dict(blob["optimizer"])
            step, elapsed, history = blob["step"], blob["elapsed"], blob["history"]
            history["config"] = asdict(config)
            log(f"resumed from {checkpoint_path} at step {step} ({elapsed / 60:.1f} min trained)")
        else:
            log(f"ignoring {checkpoint_path}: it was made with other settings")
    budget = config.minutes * 60
    generator = torch.Generator().manual_seed(config.seed + step)
    last_eval = last_ckpt = time.perf_counter()
    window = []
    while (elapsed < budget or config.minutes <= 0) and (config.max_steps <= 0 or step < config.max_steps):
        t0 = time.perf_counter()
        lr = config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(elapsed / budget, 1.0)))) if budget > 0 else config.lr
        for group in optimizer.param_groups:
            group["lr"] = lr
        rows = train_rows[torch.randint(len(train_rows), (config.batch_size,), generator=generator)]
        loss, _ = _loss(heads, hidden[rows].to(device), targets[rows].to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        window.append(float(loss.detach()))
        now = time.perf_counter()
        elapsed += now - t0
        if now - last_eval >= config.eval_seconds or step == 1:
            val_loss, acc = _evaluate(heads, hidden[val_rows].to(device), targets[val_rows].to(device))
            history["step"].append(step)
            history["train_loss"].append(float(np.mean(window)))
            history["val_step"].append(step)
            history["val_loss"].append(val_loss)
            history["val_acc"].append(acc)
            history["seconds"].append(elapsed)
            window = []
            log(f"step {step} ({elapsed / 60:.1f}/{config.minutes:g} min): train loss {history['train_loss'][-1]:.3f}, "
                f"val loss {val_loss:.3f}, val top-1 per head {', '.join(f'{a:.2f}' for a in acc)}")
            last_eval = time.perf_counter()
        if time.perf_counter() - last_ckpt >= config.checkpoint_seconds:
            _checkpoint(checkpoint_path, heads, optimizer, step, elapsed, history, config)
            last_ckpt = time.perf_counter()
    val_loss, acc = _evaluate(heads, hidden[val_rows].to(device), targets[val_rows].to(device))
    history.update(final_val_loss=val_loss, final_val_acc=acc, steps=step, train_seconds=elapsed)
    _checkpoint(checkpoint_path, heads, optimizer, step, elapsed, history, config)
    save_heads(heads, out_path, lm, labels=config.labels, steps=step, train_seconds=round(elapsed, 1),
               final_val_acc=acc, **meta)
    with atomic_path(out_path.with_suffix(".json")) as tmp:
        tmp.write_text(json.dumps(history, indent=1))
    plot_curve(history, out_path.with_suffix(".png"))
    return history


def _same_run(a: dict, b: dict) -> bool:
    """Whether a checkpoint can be resumed: equal settings except the budget and the logging cadence."""
    free = {"minutes", "max_steps", "eval_seconds", "checkpoint_seconds"}
    return {k: v for k, v in a.items() if k not in free} == {k: v for k, v in b.items() if k not in free}


def _loss(heads, hidden, targets):
    logits = heads.logits(hidden)                       # [B, h-1, S]
    per_head = [F.cross_entropy(logits[:, i], targets[:, i], ignore_index=IGNORE) for i in range(logits.shape[1])]
    per_head = [x if torch.isfinite(x) else logits.sum() * 0 for x in per_head]
    return torch.stack(per_head).sum(), logits


@torch.no_grad()
def _evaluate(heads, hidden, targets):
    if len(hidden) == 0:
        return float("nan"), []
    loss, logits = _loss(heads, hidden, targets)
    hit = (logits.argmax(-1) == targets) & (targets >= 0)
    acc = (hit.sum(0) / (targets >= 0).sum(0).clamp(min=1)).tolist()
    return float(loss), [float(a) for a in acc]


def _checkpoint(path, heads, optimizer, step, elapsed, history, config):
    with atomic_path(path) as tmp:
        torch.save({"heads": heads.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                    "elapsed": elapsed, "history": history, "config": asdict(config)}, tmp)


def plot_curve(history: dict, path) -> Path:
    """Training curve: summed train / val loss and per-head validation top-1 accuracy vs step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(history["step"], history["train_loss"], label="train (sum over heads)")
    left.plot(history["val_step"], history["val_loss"], label="validation")
    left.set_xlabel("step")
    left.set_ylabel("cross-entropy")
    left.legend()
    accs = np.array([a for a in history["val_acc"] if a]) if history["val_acc"] else np.zeros((0, 0))
    for i in range(accs.shape[1] if accs.ndim == 2 else 0):
        right.plot(history["val_step"][-len(accs):], accs[:, i], label=f"head {i + 2}")
    right.set_xlabel("step")
    right.set_ylabel("validation top-1 accuracy")
    right.legend()
    fig.suptitle(f"blockwise heads ({history.get('config', {}).get('labels', '')} labels)")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)
    return Path(path)
