"""Atomic file writes: a reader sees the old file or the complete new one, never a part."""

from __future__ import annotations

import os
import tempfile

__all__ = ["atomic_write", "atomic_write_all"]


def _write_temp(path: str, write) -> str:
    """A flushed, fsynced temporary file in `path`'s folder holding what `write(f)` wrote."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=folder)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide the file from other users
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        _unlink(tmp)
        raise
    return tmp


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _sync_folder(folder: str) -> None:
    """Makes the renames in `folder` durable (where the platform allows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_all(files) -> None:
    """Writes every ``(path, write)`` of `files`: each `write(f)` fills a temporary file in its
    path's folder (flushed and fsynced), and only when all succeeded are they renamed over their
    paths (os.replace, atomic within a file system). An error in any write removes the temporary
    files and leaves every path as it was."""
    done: list[tuple[str, str]] = []
    try:
        for path, write in files:
            path = os.fspath(path)
            done.append((_write_temp(path, write), path))
    except BaseException:
        for tmp, _ in done:
            _unlink(tmp)
        raise
    for i, (tmp, path) in enumerate(done):
        try:
            os.replace(tmp, path)
        except BaseException:
            for later, _ in done[i:]:
                _unlink(later)
            raise
    for folder in {os.path.dirname(os.path.abspath(p)) for _, p in done}:
        _sync_folder(folder)


def atomic_write(path, write) -> None:
    """Writes one file atomically (see atomic_write_all)."""
    atomic_write_all([(path, write)])
