"""`multidraft models list | pull NAME [NAME...] | info NAME | verify [NAME...]`."""

from __future__ import annotations

import time

from multidraft.errors import CorruptCacheError
from multidraft.models import model_store, registry


def register(subparsers) -> None:
    parser = subparsers.add_parser("models", help="list, pull and inspect models", description=__doc__)
    commands = parser.add_subparsers(dest="models_command", metavar="ACTION", required=True)

    listing = commands.add_parser("list", help="the registry's aliases, their size and whether they are pulled")
    listing.set_defaults(func=cmd_list)

    pull = commands.add_parser("pull", help="download, verify and convert models so they load offline")
    pull.add_argument("names", nargs="+", metavar="NAME", help=f"aliases: {', '.join(registry.aliases())}")
    pull.add_argument("--force", action="store_true", help="pull again even if the cache entry is intact")
    pull.add_argument("--no-progress", action="store_true", help="no progress bars")
    pull.set_defaults(func=cmd_pull)

    verify = commands.add_parser("verify", help="re-hash every file of pulled models against the manifest written "
                                                "at pull time (all pulled models when no NAME is given)")
    verify.add_argument("names", nargs="*", metavar="NAME", help="aliases to check (default: every pulled model)")
    verify.set_defaults(func=cmd_verify)

    info = commands.add_parser("info", help="details of an alias (or of a local model path)")
    info.add_argument("name", metavar="NAME")
    info.add_argument("--verify", action="store_true", help="re-hash every cached file against its marker")
    info.set_defaults(func=cmd_info)


def _size(num_bytes: int) -> str:
    value = float(num_bytes)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def cmd_list(args) -> int:
    rows = [("ALIAS", "MODEL", "PARAMS", "DOWNLOAD", "STATUS")]
    for spec in registry.MODELS.values():
        status = model_store.alias_status(spec.alias)
        state = {"pulled": f"pulled ({_size(model_store.folder_size(status.path))})",
                 "missing": "not pulled",
                 "corrupt": f"corrupt: {status.reason}; run `multidraft models pull {spec.alias} --force`"}[status.state]
        rows.append((spec.alias, spec.display_name, spec.params, _size(spec.download_size), state))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


def cmd_pull(args) -> int:
    from multidraft.models.pulling import pull

    specs = [registry.get_spec(name) for name in args.names]  # reject unknown names before any download
    for spec in specs:
        started = time.perf_counter()
        already = model_store.alias_status(spec.alias).ok and not args.force
        folder = pull(spec.alias, progress=not args.no_progress, force=args.force)
        verb = "already pulled" if already else f"pulled in {time.perf_counter() - started:.0f} s"
        print(f"{spec.alias}: {verb} -> {folder}")
    return 0


def cmd_info(args) -> int:
    if not registry.is_alias(args.name):
        from multidraft.models.loader import resolve

        resolved = resolve(args.name)
        print(f"name:      {resolved.name}\nkind:      {resolved.kind}\npath:      {resolved.path}")
        if resolved.is_hf:
            from multidraft.models.hf_q8_0 import cached_files

            made = cached_files(resolved.path)
            print("q8_0:      " + (", ".join(f"{path} ({_size(path.stat().st_size)})" for path in made) if made else
                                   "none yet (made by the first load with --runner native)"))
        return 0
    spec = registry.get_spec(args.name)
    status = model_store.alias_status(spec.alias, full=args.verify)
    lines = [
        ("alias", spec.alias),
        ("model", spec.display_name),
        ("architecture", f"{spec.architecture}, {spec.params} parameters"),
        ("vocab", f"{spec.vocab_family} ({spec.vocab_size:,} tokens)"),
        ("chat model", "yes" if spec.is_chat else "no (base model)"),
        ("dtype", f"{spec.recommended_dtype} (stored); loads as bf16 where supported, else fp32"),
        ("license", spec.license),
        ("packages", " ".join(spec.packages) if len(spec.chunks) <= 3
         else f"{spec.chunks[0].requirement} ... {spec.chunks[-1].requirement} ({len(spec.chunks)} chunks)"),
        ("gguf", f"{spec.gguf_filename}, {_size(spec.gguf_size)}, sha256 {spec.gguf_sha256}"),
        ("status", {"pulled": "pulled" + (", verified" if args.verify else ""), "missing": "not pulled",
                    "corrupt": f"corrupt ({status.reason})"}[status.state]),
    ]
    if status.ok:
        lines.append(("path", f"{status.path} ({_size(model_store.folder_size(status.path))})"))
        from multidraft.models.gguf_to_hf import is_reference
        if is_reference(status.path):                              # pulled as the quantized runner's part only
            whole = model_store.gguf_entry_dir(spec.gguf_sha256)
            lines.append(("hf weights", f"{whole} ({_size(model_store.folder_size(whole))})" if whole.is_dir()
                          else "converted from the GGUF on the first load that needs them (another runner, a GPU)"))
    if spec.notes:
        lines.append(("notes", spec.notes))
    width = max(len(key) for key, _ in lines)
    for key, value in lines:
        print(f"{key + ':':<{width + 2}}{value}")
    if status.state == "corrupt":
        raise CorruptCacheError(f"{spec.alias} is partial or corrupt ({status.reason}); {model_store.repair_hint(spec.alias)}")
    return 0


def cmd_verify(args) -> int:
    """OK / FAILED per model, with the repair command; exit status 2 when any model fails, as for every error the
    user can fix (0 when all pass)."""
    specs = [registry.get_spec(name) for name in args.names]
    entries = [(spec.alias, model_store.entry_dir(spec.alias), spec.gguf_sha256, True) for spec in specs]
    if not specs:
        entries = [(spec.alias, model_store.entry_dir(spec.alias), spec.gguf_sha256, True) for spec in registry.MODELS.values()
                   if model_store.entry_dir(spec.alias).exists()]
        converted = model_store.models_root() / "from-gguf"
        if converted.is_dir():
            entries += [(f"from-gguf/{folder.name}", folder, None, False) for folder in sorted(converted.iterdir())
                        if folder.is_dir() and not folder.name.startswith(".")]
        if not entries:
            print(f"no pulled models under {model_store.models_root()}; pull one with `multidraft models pull NAME`")
            return 0
    failed = 0
    for name, folder, source_sha256, is_alias in entries:
        started = time.perf_counter()
        status = model_store.check_entry(folder, source_sha256, full=True)
        if status.ok:
            count = len(status.marker.get("files", {}))
            print(f"{name}: OK ({count} files, sha256 checked in {time.perf_counter() - started:.1f} s)")
            continue
        failed += 1
        if status.state == "missing":
            print(f"{name}: FAILED (not pulled); run `multidraft models pull {name}`")
        elif is_alias:
            print(f"{name}: FAILED ({status.reason}); {model_store.repair_hint(name)}")
        else:
            print(f"{name}: FAILED ({status.reason}); delete {folder} and load its GGUF file again to reconvert it")
    return 2 if failed else 0
