"""The Batch output file's safety rules: no run overwrites data (`check_output`, `open_output`),
a run appends whole lines only (`write_line`), `--resume` goes on only with corral's own output
(`drop_torn_tail`, `answered_counts`), and a run that wrote nothing leaves no file
(`nothing_written`).
The rules are docs/design.md section 7's "No data is lost".
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

try:
    import fcntl  # POSIX: the output file's lock
except ImportError:  # Windows: runs go unlocked
    fcntl = None


class OutputError(Exception):
    """An output path that cannot be used without risk to data; its message is one line naming
    the path."""


class NotBatchOutputError(ValueError):
    """A file `--resume` was to go on with holds a line that corral does not write."""


class OutputWriteError(OSError):
    """The output file could not be written (a full disk, an I/O error): the lines written
    before stay whole."""


def _is_output_line(line: bytes) -> bool:
    """True for a Batch output line (`output_line`): a JSON object with a `custom_id`."""
    try:
        item = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(item, dict) and isinstance(item.get("custom_id", 0), str | None)


_LINE_START = b'{"id": "batch_req_'
"""How every line `corral.tools.batch.output_line` writes begins."""


def drop_torn_tail(output: Path) -> int:
    """Make `output` end at its last whole Batch output line, so that appending keeps it valid
    JSONL: the bytes after the last newline (a line cut mid-write: `write_line` writes a line and
    its newline in one flushed call) go, and so do lines of NUL bytes at the end (what a crash can
    leave in a file's last blocks). The request of a dropped line runs again, since its
    line is then not counted by `answered_counts`.

    Nothing else is ever dropped: when a whole line is not a Batch output line (a JSON object
    with a `custom_id`), or the cut tail does not start as `output_line` starts one
    (`{"id": "batch_req_`, or a cut of that), the file is not corral's output and is left as
    it is.

    Returns the number of bytes dropped (0 when the file ends cleanly or does not exist).
    Raises NotBatchOutputError naming the first such line; OSError when the file cannot be read
    or truncated."""
    if not output.exists():
        return 0
    data = output.read_bytes()
    *whole, tail = data.split(b"\n")
    keep = len(whole)
    while keep and not whole[keep - 1].strip(b"\x00"):
        keep -= 1  # empty or NUL-only lines at the end
    for number, line in enumerate(whole[:keep], 1):
        if not _is_output_line(line):
            raise NotBatchOutputError(f"{output}: line {number} is not a Batch output line")
    torn = tail.startswith(_LINE_START) or _LINE_START.startswith(tail)
    if tail.strip(b"\x00") and not torn:
        raise NotBatchOutputError(f"{output}: line {len(whole) + 1} is not a Batch output line")
    end = sum(len(line) + 1 for line in whole[:keep])
    if end < len(data):
        os.truncate(output, end)
    return len(data) - end


def write_line(out, text: str) -> None:
    """Append one output line (`text`, without its newline) to the text stream `out`: the line
    and its newline in one write call, then flushed, so an interrupted run leaves whole lines
    and at most one torn last line (`drop_torn_tail`). Raises OutputWriteError when the stream
    cannot take it (a full disk, an I/O error)."""
    try:
        out.write(text + "\n")
        out.flush()
    except OSError as error:
        raise OutputWriteError(error.errno, error.strerror) from error


def answered_counts(*outputs: Path) -> Counter:
    """How many lines of the `outputs` answer each custom_id (None: input lines that named
    none, whose error lines have a null custom_id), for `--resume` (`batch.unanswered`); a line
    that is not a JSON object with a custom_id, and the bytes after the last newline (a torn
    last line, which `drop_torn_tail` drops), are not counted."""
    counts = Counter()
    for output in outputs:
        if not output.exists():
            continue
        *whole, _torn = output.read_text(encoding="utf-8", errors="replace").split("\n")
        for text in whole:
            try:
                custom_id = json.loads(text)["custom_id"]
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
            counts[custom_id if isinstance(custom_id, str) else None] += 1
    return counts


def check_output(source: Path, output: Path, resume: bool) -> None:
    """Refuse an output path that would overwrite data or cannot be written.

    Raises OutputError: `output` is a folder, is in a folder that does not exist or cannot be
    written, is the input file itself (the same file through any path, symlink or hard link:
    `os.path.samefile`), exists, is not empty and `resume` is False, or is not a regular file
    (a device, a pipe) and `resume` is True."""
    if output.is_dir():
        raise OutputError(f"{output}: is a folder; -o names the output file")
    folder = output.absolute().parent
    if not folder.is_dir():
        raise OutputError(f"{output}: its folder does not exist")
    if output.exists():
        if os.path.samefile(source, output):
            raise OutputError(f"{output}: is the input file itself; give another -o path")
        if resume and not output.is_file():  # a device or a pipe: nothing to go on with
            raise OutputError(f"{output}: is not a regular file; --resume needs one")
        if output.stat().st_size > 0 and not resume:
            raise OutputError(
                f"{output}: already exists and is not empty; use --resume to go on with it, "
                "or give another -o path"
            )
        if not os.access(output, os.W_OK):
            raise OutputError(f"{output}: cannot be written")
    elif not os.access(folder, os.W_OK):
        raise OutputError(f"{output}: its folder cannot be written")


def open_output(output: Path, resume: bool):
    """Open `output` for appending (creating it) and lock it for this run: an exclusive,
    non-blocking `flock` (POSIX advisory lock, released when the process ends), so that two
    runs never write one output file at once (each would answer every line). Returns the open
    text stream.

    Raises OutputError: the file cannot be opened for writing (naming the system's reason),
    another run holds its lock, or it became non-empty after `check_output` and `resume` is
    False (another run wrote it in between)."""
    try:
        out = output.open("a", encoding="utf-8")
    except OSError as error:
        raise OutputError(f"{output}: cannot open it for writing: {error.strerror}") from None
    try:
        if fcntl is not None:
            fcntl.flock(out.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        out.close()
        raise OutputError(
            f"{output}: another corral run is writing it; wait for it to end or give another "
            "-o path"
        ) from None
    except OSError:
        pass  # a file system without locks (some network ones): the run goes unlocked
    if not resume and output.stat().st_size > 0:
        out.close()
        raise OutputError(f"{output}: was written by another run meanwhile; give another -o path")
    return out


def nothing_written(output: Path) -> bool:
    """True when `output` is a regular file still empty: no line was written to it (a run that
    created it then removes it)."""
    try:
        return output.is_file() and output.stat().st_size == 0
    except OSError:
        return False


def held(output: Path) -> str:
    """What `output` holds, for the messages of a run that stopped: its complete lines, or that
    no output was written."""
    if not output.is_file():  # a device (/dev/full reads as endless zeros), a pipe
        return f"{output} is not a regular file"
    if nothing_written(output):
        return "no output was written"
    try:
        held = output.read_bytes().count(b"\n")
    except OSError:
        return f"{output} cannot be read back"
    return f"{output} holds {held} complete line{'' if held == 1 else 's'}"


def discard_if_empty(output: Path, created: bool) -> None:
    """Remove `output` when this run created it and no line was written to it (a run that
    wrote nothing leaves no file behind)."""
    if created and output.exists() and output.stat().st_size == 0:
        output.unlink()
