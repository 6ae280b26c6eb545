"""Scrubbing text before it goes into a prompt: nothing about the user's machine leaves it.

Failure details, compiler and loader logs and lesson texts are written by tools running on the
user's machine; they carry the home directory, the user name, absolute paths of scratch
directories and sometimes a Python traceback. The endpoint needs none of that to fix a kernel:
`scrub` keeps the message and drops the machine.

- a Python traceback becomes one line naming the exception type (its frames are local paths);
- the home directory becomes `~`, the user name `<user>` (whole words only);
- any other absolute path becomes `<path>`, except that a path whose file name is one of
  `keep_names` (the candidate's own source file) becomes that bare file name, so a compiler's
  `/tmp/ks-x1/cand.c:12:5: error` still reads `cand.c:12:5: error`.

Never applied to kernel source: it is the model's own text and edits must match it verbatim.
"""

from __future__ import annotations

import getpass
import os
import re
from collections.abc import Iterable
from pathlib import Path

TRACEBACK = re.compile(
    r"Traceback \(most recent call last\):\n"  # the header
    r"(?:[ \t]+.*\n|\n)*?"  # indented frame and source lines
    r"(?P<last>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)?\b[^\n]*)",
)
# A path: starts at a separator not preceded by a word character or another path character
# (so `a/b` and URLs' `//host` parts are left alone), at least two components deep, or the
# file-system root's well-known directories; `-I/x/y` style options count as paths too.
ABS_PATH = re.compile(r"(?:(?<![\w./~:-])|(?<=\s-[A-Za-z])|(?<=^-[A-Za-z]))(/(?:[\w.+@%-]+/)+[\w.+@%-]*|/(?:home|root|Users|tmp|var|"
                      r"etc|proc|usr|opt|mnt|media|srv|run)\b)")
WINDOWS_PATH = re.compile(r"\b[A-Za-z]:\\(?:[^\\\s:\"'<>|]+\\)*[^\\\s:\"'<>|]*")
MIN_USER_NAME = 3  # shorter names would clobber ordinary words


def _user_names() -> set[str]:
    names = set()
    for getter in (getpass.getuser, lambda: os.environ.get("USER", ""),
                   lambda: os.environ.get("LOGNAME", ""), lambda: Path.home().name):
        try:
            name = (getter() or "").strip()
        except (OSError, KeyError, RuntimeError):  # no passwd entry / HOME: nothing to hide
            name = ""
        if len(name) >= MIN_USER_NAME:
            names.add(name)
    return names


def home_dirs() -> set[str]:
    homes = set()
    for raw in (os.environ.get("HOME", ""), str(Path.home())):
        raw = raw.rstrip("/")
        if len(raw) > 1:
            homes.add(raw)
            try:
                homes.add(os.path.realpath(raw))
            except OSError:
                pass
    return homes


def scrub(text: str | None, *, keep_names: Iterable[str] = ()) -> str:
    """`text` with tracebacks, home directory, user name and absolute paths removed."""
    if not text:
        return ""
    keep = {n for n in keep_names if n}
    out = text.replace("\r\n", "\n")
    out = TRACEBACK.sub(lambda m: f"[python traceback removed] {_exc_type(m['last'])}", out)
    for home in sorted(home_dirs(), key=len, reverse=True):
        out = re.sub(re.escape(home) + r"(?=/|\b|$)", "~", out)

    def path(m: re.Match) -> str:
        p = m.group(0)
        name = p.rstrip("/").rsplit("/", 1)[-1]
        return name if name in keep else "<path>"

    out = ABS_PATH.sub(path, out)
    out = re.sub(r"~/(?:[\w.+@%-]+/)*[\w.+@%-]*",
                 lambda m: path(m) if m.group(0).rsplit("/", 1)[-1] in keep else "~/<path>", out)
    out = WINDOWS_PATH.sub(lambda m: m.group(0).rsplit("\\", 1)[-1]
                           if m.group(0).rsplit("\\", 1)[-1] in keep else "<path>", out)
    for name in sorted(_user_names(), key=len, reverse=True):
        out = re.sub(rf"(?<![\w]){re.escape(name)}(?![\w])", "<user>", out)
    return out


def _exc_type(last_line: str) -> str:
    """Only the exception's type: its message may quote paths or data."""
    m = re.match(r"([A-Za-z_][\w.]*)", last_line.strip())
    return m.group(1).rsplit(".", 1)[-1] if m else "error"
