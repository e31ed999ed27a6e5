"""Files that appear whole or not at all, and the error of an output location that cannot take
them: the lowest floor of the results layer (:mod:`ctmhsa.sims.io` and :mod:`ctmhsa.sims.nwb`
both build on it, so neither imports the other)."""

from __future__ import annotations

import contextlib
import os
import tempfile

__all__ = ["OutputError", "atomic_path"]


class OutputError(ValueError):
    """An output location that cannot take the results: something there that is not a results
    directory of this project, not writable, or too little free space. A ``ValueError``, so the
    command line reports it in one line."""


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _public(path: str, directory: bool = False) -> None:
    """Give ``path`` the permissions the umask allows (temporary files and directories are
    created owner-only)."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


@contextlib.contextmanager
def atomic_path(path: str, suffix: str):
    """A temporary path beside ``path`` to write; renamed onto ``path`` (world-readable) only when
    the block completes, removed otherwise: a file at ``path`` is always complete."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=suffix)
    os.close(fd)
    try:
        yield tmp
        _public(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
