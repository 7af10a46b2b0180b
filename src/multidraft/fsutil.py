"""Small file helpers: checksums and writes that never leave a half-written file behind."""

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path


def sha256_file(path, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def atomic_path(final_path):
    """Yield a temporary path beside `final_path`; rename it into place only if the block succeeds.

    Works for files and folders. On any exception the temporary is removed and `final_path` is untouched.
    """
    final_path = Path(final_path)
    final_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final_path.name}.", suffix=".partial", dir=final_path.parent))
    target = tmp / final_path.name
    try:
        yield target
        if final_path.is_dir():
            shutil.rmtree(final_path)
        elif final_path.exists():
            final_path.unlink()
        os.replace(target, final_path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
