"""Where a command writes a trained model: checked before the work, replaced whole after it.

One rule for every command that trains something and writes it to ``--out``
(``train ppo``, ``forecast train``, ``telemetry fit-pca``):

- :func:`check_output` runs before any work starts and refuses a path that is a
  directory, or whose folder cannot be written (the nearest folder that exists must be
  a writable directory; missing folders below it are created when the file is saved);
  :func:`check_output_dir` does the same for a folder a report is written in.
- :func:`write_replacing` writes to a temporary file beside the target and moves it
  over the target with :func:`os.replace`, so a failed write leaves the old file (or
  none) in place, never half a model; a failure is a :class:`DependencyError` naming
  the path and the cause. The file keeps the replaced file's permissions, or gets
  those of any new file (the umask's), not the 0600 safetensors writes with: a
  model trained by one user is served by another (``serve --forecast-model``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from safetensors import SafetensorError

from kubesage.core.errors import DependencyError, InputError


def _existing_folder(path: Path) -> Path:
    """The nearest ancestor of ``path`` that exists (``path``'s own folder if it does)."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def check_output(path: Path, option: str = "--out") -> None:
    """Refuse, before the work, an output file that could not be written."""
    if path.is_dir():
        raise InputError(f"{option} {path} is a directory, not a file to write")
    folder = _existing_folder(path)
    if not folder.is_dir():
        raise InputError(f"{option} {path}: {folder} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path}: no permission to write in {folder}")


def check_output_dir(path: Path, option: str) -> None:
    """Refuse, before the work, a folder of outputs (a report's) that could not be
    written: a file in its place, or a nearest existing folder that is not writable."""
    if path.exists() and not path.is_dir():
        raise InputError(f"{option} {path} is a file, not a folder to write the report in")
    folder = path if path.is_dir() else _existing_folder(path)
    if not folder.is_dir():
        raise InputError(f"{option} {path}: {folder} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path}: no permission to write in {folder}")


@contextlib.contextmanager
def writing_report(path: Path, option: str) -> Iterator[None]:
    """Turn a failure to write the report folder ``path`` (a folder where a file goes, a
    volume gone read-only) into an error naming the option, the folder and the file."""
    try:
        yield
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise DependencyError(
            f"{option} {path}: the report could not be written{where}: {exc.strerror or exc}"
        ) from exc


def _mode_for(target: Path, temporary: Path) -> int:
    """The permissions the written model gets: the replaced file's, or for a new file
    those any file created here gets (0666 less the umask, read off ``temporary``,
    created empty for it)."""
    if target.exists():
        return stat.S_IMODE(target.stat().st_mode)
    os.close(os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    return stat.S_IMODE(temporary.stat().st_mode)


def write_replacing(path: Path, write: Callable[[Path], object]) -> Path:
    """Call ``write`` on a temporary file beside ``path``, then move it onto ``path``.

    A symbolic link at ``path`` is followed: the file it points to is replaced.
    """
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = _mode_for(target, temporary)
        write(temporary)
        os.chmod(temporary, mode)  # safetensors writes 0600: unreadable to a server's user
        os.replace(temporary, target)
    except (OSError, SafetensorError) as exc:
        raise DependencyError(f"could not write {path} ({exc}); {path} was not changed") from exc
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
    return path
