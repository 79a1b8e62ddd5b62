"""File-system primitives every reader and writer shares: bounded reads, atomic writes, hashes.

An atomic write goes to a temporary file in the target's directory (so ``os.replace`` is a
rename on one file system), is fsynced, gets the mode an ordinary write would have given
it (an existing file keeps its mode; a new one gets 0666 minus the umask, not mkstemp's
0600), and replaces the target in one step. If anything fails first, the temporary file is
removed and the old target is untouched: a killed guard never leaves a half-written
results file, golden, manifest or cached model. A kill (SIGKILL: no cleanup runs) can
leave the temporary file, ``.<name>.<pid>-<random>.tmp``; the next write of the same
target removes those whose process is gone. A full disk is reported with the path and the
bytes the write needed (``DiskFullError``).

A bounded read (``read_bounded``) opens only regular files and refuses one over a size
limit before reading it: a suite path that is ``/dev/zero`` must not exhaust memory, and a
FIFO must not block forever. It raises ``BoundedReadError`` (an ``OSError`` with a
one-line ``reason``) that callers turn into their own one-line message.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import stat
import tempfile
from pathlib import Path

from guard.core import fault

# Suite, results, manifest, build-record and golden-metadata files are small documents; a
# results file of a large suite with raw samples is a few MiB. 64 MiB is far above any
# real one and far below what hurts.
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024


class BoundedReadError(OSError):
    """A file that ``read_bounded`` refuses: not a regular file, too large, unreadable."""

    def __init__(self, path: Path, reason: str, err: int = errno.EINVAL):
        super().__init__(err, reason, str(path))
        self.path = Path(path)
        self.reason = reason


def file_kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words: 'a FIFO', 'a directory', ..."""
    for test, kind in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symlink"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def not_regular(path: Path, mode: int) -> BoundedReadError:
    """The error for a path that is not a regular file, naming what it is."""
    if stat.S_ISDIR(mode):
        return BoundedReadError(path, "is a directory, not a file", errno.EISDIR)
    return BoundedReadError(path, f"is {file_kind(mode)}, not a regular file")


def regular_file_size(path: str | os.PathLike[str]) -> int:
    """The size of ``path`` if it is a regular file (symlinks followed), without opening it.

    FileNotFoundError if it does not exist; BoundedReadError naming its kind (a FIFO, a
    directory, a device, a socket) if it is anything else, so no reader ever blocks on a
    FIFO or reads a device without end.
    """
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise BoundedReadError(
            p, f"cannot be read: {exc.strerror or exc}", exc.errno or errno.EIO
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise not_regular(p, st.st_mode)
    return st.st_size


def read_bounded(path: str | os.PathLike[str], limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The bytes of a regular file no larger than ``limit``; anything else is refused.

    The file is opened with O_NONBLOCK (a FIFO does not block the open) and checked with
    ``fstat`` on the open descriptor (no race between the check and the read); at most
    ``limit + 1`` bytes are read, so a file that grows meanwhile is refused too.
    """
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise BoundedReadError(p, "is a directory, not a file", errno.EISDIR) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BoundedReadError(p, "is a symlink loop", errno.ELOOP) from None
        raise BoundedReadError(
            p, f"cannot be read: {exc.strerror or exc}", exc.errno or errno.EIO
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(p, st.st_mode)
        if st.st_size > limit:
            raise BoundedReadError(
                p,
                f"is {st.st_size} bytes, over guard's limit of {limit} bytes for this file",
                errno.EFBIG,
            )
        chunks: list[bytes] = []
        total = 0
        while True:
            try:
                chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            except OSError as exc:
                raise BoundedReadError(
                    p, f"cannot be read: {exc.strerror or exc}", exc.errno or errno.EIO
                ) from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise BoundedReadError(
                    p, f"is over guard's limit of {limit} bytes for this file", errno.EFBIG
                )
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_bounded_text(path: str | os.PathLike[str], limit: int = MAX_DOCUMENT_BYTES) -> str:
    """``read_bounded`` decoded as UTF-8 (UnicodeDecodeError when it is not)."""
    return read_bounded(path, limit).decode("utf-8")


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


class DiskFullError(OSError):
    """No space (or quota) left for a write: ``filename`` is the file, ``strerror`` says
    how many bytes it needed and how many are free."""

    def __init__(self, path: Path, needed: int, err: int = errno.ENOSPC, reason: str = ""):
        try:
            st = os.statvfs(path.parent)
            free: int | None = st.f_bavail * st.f_frsize
        except OSError:
            free = None
        self.needed = needed
        self.free = free
        left = f", {free} free" if free is not None else ""
        what = reason or ("disk quota exceeded" if err == errno.EDQUOT else "no space left")
        super().__init__(err, f"{what} ({needed} bytes needed{left})", str(path))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, owned by someone else
    return True


def _temporary(target: Path) -> tuple[int, str]:
    """A new temporary file beside ``target``, named for this process; stale ones (their
    process is gone: a kill) are removed first."""
    for stale in target.parent.glob(f".{target.name}.*.tmp"):
        pid = stale.name[len(target.name) + 2 :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            stale.unlink(missing_ok=True)
    return tempfile.mkstemp(
        prefix=f".{target.name}.{os.getpid()}-", suffix=".tmp", dir=target.parent
    )


def _write_tmp(fd: int, tmp: str, target: Path, data: bytes) -> None:
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(target, len(data), exc.errno, exc.strerror or "") from None
        raise
    fault.point("atomic_write", target.name)  # written, not yet in place


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; return the path written."""
    target = Path(path)
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = _new_file_mode()
    fd, tmp = _temporary(target)
    try:
        _write_tmp(fd, tmp, target, data)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """``atomic_write_bytes`` of ``text`` encoded as UTF-8."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def exclusive_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Create ``path`` with ``text`` only if it does not exist yet (FileExistsError if it does).

    The content is written to a temporary file first and then hard-linked to ``path``:
    ``link`` fails when the name exists, so two writers never overwrite each other, and a
    reader never sees a half-written file.
    """
    target = Path(path)
    fd, tmp = _temporary(target)
    try:
        _write_tmp(fd, tmp, target, text.encode("utf-8"))
        os.chmod(tmp, _new_file_mode())
        os.link(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return target


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@functools.cache
def sources_sha256(root: Path) -> str:
    """SHA-256 over the relative paths and bytes of every ``.py`` file under ``root`` (a
    cache key's "this code": any edit of any module under it is another key). Read once
    per process."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def describe_os_error(exc: OSError) -> str:
    """A short reason for an OSError a user can fix (full disk, read-only, permissions)."""
    names = {
        errno.ENOSPC: "no space left on the device",
        errno.EROFS: "read-only file system",
        errno.EACCES: "permission denied",
        errno.EPERM: "operation not permitted",
        errno.EDQUOT: "disk quota exceeded",
        errno.ELOOP: "a symlink loop",
        errno.ENAMETOOLONG: "file name too long",
    }
    if isinstance(exc, DiskFullError):
        return str(exc.strerror)
    return names.get(exc.errno or 0, exc.strerror or str(exc))


# OSError numbers that mean the user's environment, not guard, is at fault.
USER_OS_ERRNOS = frozenset(
    {
        errno.ENOSPC,
        errno.EROFS,
        errno.EACCES,
        errno.EPERM,
        errno.EDQUOT,
        errno.ELOOP,
        errno.ENAMETOOLONG,
        errno.EFBIG,
        errno.ENOTDIR,
        errno.EISDIR,
    }
)
