"""PLD+: prompt lookup ranked by the target model's own hidden states or induction-head attention.

- `ranking`: candidate occurrences of the last token and the two rankers (specs/pldplus.md §3.2-3.4).
- `store`: the artifact store (one layer's hidden states, or the last attention row of chosen heads).
- `induction`: offline induction-head calibration (the model's own attention heads that copy from the prompt).
- `calibration`: the stored calibrations, the per-model defaults (cache, then shipped package data) and the
  resolver of `method="pld_plus"`'s layer and induction heads.
The drafter itself is `multidraft.drafters.pld_plus.PLDPlusDrafter` (`method="pld_plus"`).
"""

from multidraft.pldplus.ranking import candidates, rank_attention, rank_hidden
from multidraft.pldplus.store import AttentionRowStore, HiddenStore

__all__ = ["AttentionRowStore", "HiddenStore", "candidates", "rank_attention", "rank_hidden"]
