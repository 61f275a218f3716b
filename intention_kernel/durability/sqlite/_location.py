"""Where the database lives: path or ``sqlite:///`` URL, and the checks on that place.

Refused before anything is opened or created (``ConfigurationError``):

- a directory that does not exist: creating it would turn a mistyped path into an empty
  ledger, and completed effects would run again;
- a network filesystem (NFS, SMB, sshfs, ...): WAL mode needs shared memory between the
  processes of one host, locking and the ``-shm`` file do not work there and the database can
  be corrupted;
- a filesystem in memory (tmpfs such as ``/dev/shm``, ramfs): the store promises that what
  was committed survives a power loss. ``IK_SQLITE_ALLOW_RAM=1`` accepts one anyway, for
  throw-away stores and tests that need a small or read-only filesystem.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...contracts.errors import ConfigurationError
from .._urls import parse_location  # the path of a ``sqlite:///`` URL: URL parsing

__all__ = [
    "ALLOW_RAM_ENV",
    "NETWORK_FILESYSTEMS",
    "RAM_FILESYSTEMS",
    "check_local",
    "filesystem_type",
    "parse_location",
    "require_directory",
]

NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb",
        "smb2",
        "smb3",
        "smbfs",
        "ncpfs",
        "afs",
        "coda",
        "9p",
        "ceph",
        "glusterfs",
        "lustre",
        "gpfs",
        "ocfs2",
        "gfs2",
        "davfs",
        "fuse.sshfs",
        "fuse.glusterfs",
        "fuse.cephfs",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "fuse.rclone",
        "fuse.davfs",
        "fuse.juicefs",
    }
)

RAM_FILESYSTEMS = frozenset({"tmpfs", "ramfs", "devtmpfs"})
ALLOW_RAM_ENV = "IK_SQLITE_ALLOW_RAM"


def _unescape(field: str) -> str:
    # /proc/mounts escapes space, tab, newline and backslash as octal.
    for octal, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(octal, char)
    return field


def filesystem_type(path: Path, mounts: str) -> str | None:
    """The type of the filesystem holding ``path``, from the text of ``/proc/mounts``."""
    best: tuple[int, str] | None = None
    target = str(path)
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point, fstype = _unescape(fields[1]), fields[2]
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= best[0]):
            best = (len(point), fstype)
    return None if best is None else best[1]


def _existing_ancestor(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate.resolve()
    return Path("/")


def require_directory(path: Path) -> None:
    """Refuse, with ``ConfigurationError``, to create ``path`` in a directory that does not
    exist (checked when the file or the lock directory is first created, not when the adapter
    is constructed)."""
    if not path.parent.is_dir():
        raise ConfigurationError(
            f"the directory {path.parent} does not exist; create it first (a mistyped path"
            " would start an empty store)",
            context={"setting": "url", "path": str(path.parent)},
        )


def check_local(path: Path, *, mounts_file: str = "/proc/mounts") -> None:
    """Refuse, with ``ConfigurationError``, a path on a network filesystem or in memory (its
    nearest existing directory tells which filesystem it is on; see the module docstring)."""
    try:
        with open(mounts_file, encoding="utf-8", errors="replace") as handle:
            mounts = handle.read()
    except OSError:
        return  # not Linux: nothing to read; the documentation states the limit
    fstype = (filesystem_type(_existing_ancestor(path), mounts) or "").lower()
    if fstype in NETWORK_FILESYSTEMS:
        raise ConfigurationError(
            "SQLite in WAL mode needs a local filesystem; this path is on a network filesystem",
            context={"setting": "url", "filesystem": fstype},
        )
    if fstype in RAM_FILESYSTEMS and os.environ.get(ALLOW_RAM_ENV) != "1":
        raise ConfigurationError(
            f"this path is on a filesystem in memory ({fstype}): a reboot or power loss would"
            f" lose every committed turn; use a disk (or set {ALLOW_RAM_ENV}=1 for a"
            " throw-away store)",
            context={"setting": "url", "filesystem": fstype},
        )
