"""Old name of `multidraft.pldplus.induction` (PLD+ induction-head calibration), kept so existing imports work.

"heads" elsewhere in multidraft means the trained BPD prediction heads (`multidraft.heads`); PLD+'s are the
model's own attention heads, hence the new module name.
"""

from multidraft.pldplus.induction import (FORMAT_VERSION, attention_argmax, calibrate, copy_events,  # noqa: F401
                                          count_hits, rank_heads)
from multidraft.pldplus.calibration import cache_file, default_heads, default_layer, load_record, save  # noqa: F401
