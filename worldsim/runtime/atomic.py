"""Atomic file and folder writes: a reader never sees a half-written file, and a crash (even SIGKILL)
leaves the previous version in place."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` to write; on success it replaces ``path``
    (``os.replace``), on error it is deleted. The suffix is kept so writers that choose a
    format by extension (imageio, h5py) still work."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        # mkstemp creates owner-only files; give the result the permissions a plain open() would
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_dir(path: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a new temporary sibling folder of ``path`` to fill; on success it is renamed to
    ``path``, on error it is deleted (``path`` untouched). An existing ``path`` is refused with
    ``FileExistsError`` before anything is written, unless ``overwrite``: then the old folder is
    renamed aside, the new one renamed into place and the old one deleted, so ``path`` never
    holds a mix of both (between the two renames it briefly does not exist)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"{path} exists and is not a folder")
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; pass overwrite=True (--overwrite) to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        # mkdtemp creates an owner-only folder; give the result the permissions mkdir would
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / path.name)
            try:
                os.replace(tmp, path)
            except BaseException:
                os.replace(old / path.name, path)  # the previous folder goes back
                os.rmdir(old)
                raise
            shutil.rmtree(old)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
