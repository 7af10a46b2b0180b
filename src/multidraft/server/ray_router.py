"""Session affinity for `serve --ray`: the Ray Serve request router of the engine deployment.

Serve runs a deployment's router beside each handle to it (here: in the ingress) and asks it which replica takes a
request. This one keeps a session on one replica by rendezvous hashing (highest random weight) of the session digest
the ingress computed against each live replica's id: the same replica while it lives, and a replica that leaves or
joins moves only the sessions that hash to it. Requests without a session go to the shortest known queue.

Serve pickles this module by value into every handle's process (RequestRouterConfig), so it imports nothing of ours.
"""

from __future__ import annotations

import hashlib
import random
from typing import Optional

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica


def rendezvous_weight(session: str, replica: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{session}|{replica}".encode(), digest_size=8).digest(), "big")


def pick_replica(session: Optional[str], replicas: list[str], queue_lengths: dict, avoid: Optional[str] = None) -> str:
    """The replica for a request: the highest rendezvous weight for a session, else the shortest known queue. `avoid`
    (a replica that just failed this request) is left out unless it is the only one."""
    pool = [r for r in replicas if r != avoid] or list(replicas)
    if session is not None:
        return max(pool, key=lambda r: rendezvous_weight(session, r))
    return min(pool, key=lambda r: (queue_lengths.get(r) or 0, random.random()))


class AffinityRouter(RequestRouter):
    """Serve's router for the engine deployment (it runs beside each handle, in the ingress): one replica per request,
    chosen by `pick_replica` from the `route` argument the ingress passes ({"session", "avoid"}). It writes its choice
    back into that dict ("replica"), so the ingress knows which replica to avoid on a retry. A chosen replica that is
    full is waited for (backoff), not swapped: the session's store is there."""

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: Optional[PendingRequest] = None) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        route = pending_request.kwargs.get("route") if pending_request is not None else None
        route = route if isinstance(route, dict) else {}
        if pending_request is not None:
            pending_request.routing_context.should_backoff = True     # back off between tries of a full replica
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        cache = self.replica_queue_len_cache
        lengths = {unique: cache.get(r.replica_id) for unique, r in by_id.items()}
        chosen = pick_replica(route.get("session"), list(by_id), lengths, route.get("avoid"))
        route["replica"] = chosen
        return [[by_id[chosen]]]
