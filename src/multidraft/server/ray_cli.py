"""The `serve --ray` flags: replicas of the server on Ray Serve (server/ray_deployment.py), from the same flags.

Everything else `multidraft serve` takes (model, limits, keys, artifacts, batching) builds the same `ServerConfig`
here as for one process; that config, the model flags and the operator's files go to every replica.
Ray is imported only once `--ray` is given.
"""

from __future__ import annotations

import re

from multidraft.errors import MultidraftError

AUTOSCALE = re.compile(r"^(\d+)\.\.(\d+)$")


class RayServeError(MultidraftError):
    """`multidraft serve --ray` flags that cannot work together."""


def add_ray_arguments(parser) -> None:
    group = parser.add_argument_group("replicas on Ray Serve (one endpoint, several model copies)")
    group.add_argument("--ray", action="store_true",
                       help="serve with Ray Serve: one ingress (security, API key, routing) and --replicas engine "
                            "replicas, one model each; a session (X-Session-Id header, the body's `user`, else the "
                            "API key) stays on one replica, whose suffix store holds its history (README: Scale-out)")
    group.add_argument("--replicas", type=int, default=None, metavar="N", help="engine replicas (default 1)")
    group.add_argument("--autoscale", default=None, metavar="MIN..MAX",
                       help="scale between MIN and MAX replicas on ongoing requests instead of a fixed --replicas")
    group.add_argument("--ray-address", default=None, metavar="ADDR",
                       help="an existing Ray cluster (e.g. auto, or HEAD_IP:6379); default: a local Ray started here. "
                            "With --ray, --threads N (default 1) is each replica's thread count and the CPUs Ray "
                            "reserves for it")


def check_ray_flags(args, config) -> None:
    """Refuse --ray settings that cannot work, before anything starts."""
    if not args.ray:
        for flag in ("replicas", "autoscale", "ray_address"):
            if getattr(args, flag, None) is not None:
                raise RayServeError(f"--{flag.replace('_', '-')} needs --ray")
        return
    if args.replicas is not None and args.autoscale is not None:
        raise RayServeError("give --replicas or --autoscale, not both")
    if args.replicas is not None and args.replicas < 1:
        raise RayServeError(f"--replicas must be at least 1, got {args.replicas}")
    autoscale_range(args.autoscale)
    if args.threads == "auto":
        raise RayServeError("--threads auto measures this machine, not the replicas' nodes: give --ray a number of "
                            "threads per replica (default 1)")
    if config.suffix_store_path:
        raise RayServeError("--suffix-store-path keeps one process's stores; with --ray each replica keeps its "
                            "sessions' stores in memory (leave the flag out)")


def autoscale_range(text):
    if text is None:
        return None
    match = AUTOSCALE.match(text.strip())
    low, high = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    if not match or low < 1 or high < low:
        raise RayServeError(f"--autoscale takes MIN..MAX with 1 <= MIN <= MAX (e.g. 1..4), got {text!r}")
    return low, high


def spec_from_args(args, config):
    """The ServeSpec of these flags (the config already built and checked by the serve command)."""
    from multidraft.models.runner_choice import dtype_choice
    from multidraft.server.ray_deployment import ServeSpec
    from multidraft.server.shipping import describe_artifacts

    return ServeSpec(config=config, model=args.model, draft=args.draft, dtype=dtype_choice(args.dtype),
                     device=args.device, runner=args.runner, threads=args.threads or 1,
                     replicas=args.replicas or 1, autoscale=autoscale_range(args.autoscale),
                     shipped=describe_artifacts(config.artifacts), log_level=args.log_level)


def run_on_ray(args, config) -> int:
    from multidraft.server.ray_deployment import run

    run(spec_from_args(args, config), args.ray_address, args.host, args.port)
    return 0
