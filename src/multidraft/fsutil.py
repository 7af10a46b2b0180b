"""Small file helpers: checksums and writes that never leave a half-written file behind.

`atomic_path` keeps one promise even across a crash (kill -9, power loss) at any point: afterwards the path holds
either its old version, intact, or its new version, complete. A file is renamed over the old one (one atomic
rename). A folder cannot be renamed over a non-empty folder, so the old one is first renamed aside
(`.<name>.<random>.old`), the new one renamed in, then the old one removed; a crash between the two renames
leaves only the aside copy, which `recover` (called by `atomic_path` itself and by the readers of cache folders)
renames back. A writer's temporary (`.<name>.<random>.partial`) is held with a lock while it is written, so one that a
killed writer left is told from a live one and removed by `remove_stale_partials` (a reader's start-up sweep).
Data is fsync'ed before the rename and the folder's entry after it, so the rename never points at
data the disk does not have yet.

Fault injection (tests only): MULTIDRAFT_CRASH_AT=STEP[@N] kills the process with SIGKILL the N-th time (default
1st) it reaches STEP, one of the names passed to `crash_point` (see CRASH_STEPS).
"""

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import tempfile
import time
from pathlib import Path

from multidraft.errors import OutputPathError

CRASH_ENV = "MULTIDRAFT_CRASH_AT"
# The steps of one atomic write: the new version written and synced (old untouched), the old folder moved aside
# (folders only), the new version renamed in (the aside copy not yet removed).
CRASH_STEPS = ("atomic.written", "atomic.aside", "atomic.renamed")
_crash_counts: dict[str, int] = {}


def crash_point(step: str) -> None:
    """Die here, as kill -9 would, when MULTIDRAFT_CRASH_AT names this step (fault-injection tests)."""
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return
    name, _, nth = wanted.partition("@")
    if name != step:
        return
    _crash_counts[step] = _crash_counts.get(step, 0) + 1
    if _crash_counts[step] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)


def sha256_file(path, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


# A file changed less than this many seconds ago may still be being written within one timestamp tick: its digest is
# not remembered (git's "racy" index entries, the same cure).
SETTLED_SECONDS = 2.0


def remembered_sha256(path, memo_folder) -> str:
    """sha256_file of `path`, remembered in `memo_folder` under the file's identity (device, inode, size, mtime and
    ctime in ns): a GGUF of gigabytes is hashed once, not on every load (1.4 s a GB on a Zen 4). A write changes
    ctime, which no user call sets back, so a changed file is hashed again; an unreadable or stale memo is
    recomputed, never an error. Files that changed in the last SETTLED_SECONDS are hashed and not remembered. Each
    time a file is hashed, the memos of files no longer there are removed (the folder never outgrows the files)."""
    def identity_of(stat) -> list:
        return [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]

    path = Path(path).resolve()
    stat = path.stat()
    identity = identity_of(stat)
    memo = Path(memo_folder) / (hashlib.sha256(os.fsencode(path)).hexdigest()[:32] + ".json")
    try:
        entry = json.loads(memo.read_text())
        known = (entry["path"], entry["identity"]) == (str(path), identity)
        if known and re.fullmatch("[0-9a-f]{64}", entry["sha256"]):
            return str(entry["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    digest = sha256_file(path)
    _forget_missing_files(Path(memo_folder))
    if time.time() - max(stat.st_mtime, stat.st_ctime) >= SETTLED_SECONDS and identity_of(path.stat()) == identity:
        try:
            with atomic_path(memo) as target:
                target.write_text(json.dumps({"path": str(path), "identity": identity, "sha256": digest}))
        except (OSError, OutputPathError):
            pass                               # a read-only cache only costs the next load its hashing
    return digest


def _forget_missing_files(memo_folder: Path) -> None:
    """Remove remembered_sha256's memos whose file is gone, or which cannot be read (one more hash at worst)."""
    for memo in memo_folder.glob("*.json"):
        try:
            gone = not Path(json.loads(memo.read_text())["path"]).exists()
        except (OSError, ValueError, KeyError, TypeError):
            gone = True
        if gone:
            with contextlib.suppress(OSError):
                memo.unlink()


def fsync_tree(path) -> None:
    """fsync a file, or every file and folder under a folder (the folder itself last)."""
    path = Path(path)
    if path.is_dir():
        for root, dirs, files in os.walk(path, topdown=False):
            for name in files:
                _fsync(Path(root) / name, os.O_RDONLY)
            for name in dirs:
                _fsync(Path(root) / name, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        _fsync(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    elif path.exists():
        _fsync(path, os.O_RDONLY)


def fsync_dir(folder) -> None:
    """Make a rename or a new entry in `folder` durable (a no-op where folders cannot be opened, e.g. Windows)."""
    try:
        _fsync(Path(folder), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        pass


def _fsync(path: Path, flags: int) -> None:
    if path.is_symlink():
        return
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _is_real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _remove(path: Path) -> None:
    if _is_real_dir(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def _folder_lock(folder: Path):
    """An exclusive lock on `folder` (flock on the folder itself, so no lock file is left): the swap of one of its
    entries and the recovery of an aside copy never interleave between processes."""
    try:
        import fcntl
    except ImportError:          # not POSIX: no lock (one writer at a time is then the caller's business)
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:          # a filesystem without flock: go on unlocked, as before this lock existed
            pass
        yield
    finally:
        os.close(fd)             # closing releases the lock


def _try_exclusive(folder: Path):
    """(fd, locked): `folder` opened and a non-blocking exclusive flock tried on it; (None, False) without flock."""
    try:
        import fcntl
        fd = os.open(folder, os.O_RDONLY)
    except (ImportError, OSError):
        return None, False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd, True
    except OSError:
        return fd, False


def _hold(folder: Path):
    """An exclusive lock on `folder` (its fd: close it to release; None without flock), held by a writer on its
    temporary so that `remove_stale_partials` never removes a live writer's; a killed process releases it."""
    return _try_exclusive(folder)[0]


def _abandoned(folder: Path) -> bool:
    """No live process holds `folder` (see `_hold`); False where that cannot be known (no flock)."""
    fd, locked = _try_exclusive(folder)
    if fd is not None:
        os.close(fd)
    return locked


def remove_stale_partials(folder, name: str = "*") -> int:
    """Remove the temporaries (`.<name>.<random>.partial`) that killed writers of `folder/<name>` left; a live
    writer's temporary is kept. Returns how many were removed."""
    folder = Path(folder)
    if not folder.is_dir():
        return 0
    removed = 0
    for leftover in folder.glob(f".{name}.*.partial"):
        if leftover.is_dir() and _abandoned(leftover):
            shutil.rmtree(leftover, ignore_errors=True)
            removed += 1
    return removed


def _asides(final_path: Path) -> list[Path]:
    return sorted(final_path.parent.glob(f".{final_path.name}.*.old"), key=lambda p: p.lstat().st_mtime_ns)


def recover(final_path) -> None:
    """Finish what a crashed `atomic_path` left for `final_path`: put back the old version it had moved aside (when
    the new one never arrived), or remove that aside copy (when it did); remove its abandoned temporaries."""
    final_path = Path(final_path)
    parent = final_path.parent
    remove_stale_partials(parent, final_path.name)      # a killed writer's temporary (a live writer's stays)
    try:
        if not parent.is_dir() or not _asides(final_path):
            return
    except OSError:
        return
    stale = []
    with _folder_lock(parent):
        asides = _asides(final_path)
        if asides and not os.path.lexists(final_path):
            os.replace(asides[-1], final_path)       # the newest copy moved aside is the version that was there
            fsync_dir(parent)
            asides = asides[:-1]
        stale = asides
    for aside in stale:
        _remove(aside)


def check_output_file(path, what: str = "the output") -> Path:
    """Refuse, before any work, a file output that `atomic_path` could not put in place: an existing folder (which a
    file would replace) or a place where no file can be created. Creates the missing parent folders."""
    path = Path(path)
    if str(path) in ("", "."):
        raise OutputPathError(f"{what} needs a file name; got an empty path")
    if _is_real_dir(path):
        raise OutputPathError(f"{what} {path} is an existing folder; name a file (inside it, or elsewhere)")
    check_output_folder(path.parent, f"{what} {path}: its folder")
    return path


def check_output_folder(path, what: str = "the output folder") -> Path:
    """Make the folder an output goes into (if missing) and write a file there once: a place that takes no file
    fails now, before the work, not when the results are saved."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError as error:
        raise OutputPathError(f"{what} {path} cannot be written ({error.strerror or error}); choose another "
                              "folder") from None
    return path


@contextlib.contextmanager
def atomic_path(final_path):
    """Yield a temporary path beside `final_path`; move it into place only if the block succeeds.

    Works for files and folders. On any exception the temporary is removed and `final_path` is untouched; after a
    crash at any point `final_path` is its old version or its new one, complete (module docstring).
    """
    final_path = Path(final_path)
    parent = final_path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        recover(final_path)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final_path.name}.", suffix=".partial", dir=parent))
    except OSError as error:
        raise OutputPathError(f"{final_path} cannot be written ({error.strerror or error}); choose another "
                              f"place") from None
    target = tmp / final_path.name
    aside = None
    held = _hold(tmp)            # released in the finally below, after the temporary is gone
    try:
        yield target
        if not target.exists():
            raise FileNotFoundError(f"atomic_path: nothing was written at {target}")
        if not target.is_dir() and _is_real_dir(final_path):      # a file never replaces a folder and its files
            raise OutputPathError(f"{final_path} is an existing folder; a file cannot replace it: name a file")
        fsync_tree(target)
        crash_point("atomic.written")
        with _folder_lock(parent):
            # rename() replaces a file atomically, but not a folder (nor a file by a folder): move that aside first.
            if os.path.lexists(final_path) and (target.is_dir() or _is_real_dir(final_path)):
                aside = parent / f".{final_path.name}.{secrets.token_hex(6)}.old"
                os.rename(final_path, aside)
                crash_point("atomic.aside")
            try:
                os.replace(target, final_path)
            except BaseException:
                if aside is not None:            # the new version did not go in: the old one goes back
                    os.rename(aside, final_path)
                    aside = None
                raise
            fsync_dir(parent)
            crash_point("atomic.renamed")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if held is not None:
            os.close(held)
        if aside is not None:
            _remove(aside)
