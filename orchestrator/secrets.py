"""What the tool prints and sends of what it was given: secrets in URLs (a tracking
server's user:password, an Optuna storage's, a WANDB_BASE_URL's) kept out of what
it prints and sent only to the host they were given for, and the commands it
prints quoted for the shell. No Ray import."""

import re
import threading
import urllib.error
import urllib.request
from typing import Optional, Union
from urllib.parse import urlsplit, urlunsplit

# scheme://userinfo@ anywhere in a text: the user info runs to the authority's last
# @ (a password may hold one; urlsplit reads it so), the authority ending at the
# first /, ?, # or space. A password is masked (user:***@), a user part without one
# (a token: http://TOKEN@host) masked whole (***@).
_USERINFO = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^\s/?#]*)@(?=[^\s/?#@]*(?:[\s/?#]|$))")
MASK = "***"


def command(*words: str) -> str:
    """A command line to print for the user to paste: its first word as the user's
    shell runs it (orchestrator/shell.py: `scripts/icr-sweep` where the tool was
    started so), each word quoted for the shell (a path holding `$(...)`, spaces or
    quotes runs nothing), its secrets masked."""
    import shlex

    from orchestrator.shell import runnable

    first, *rest = (str(w) for w in words)
    return " ".join(shlex.quote(redact(w)) for w in (runnable(first), *rest))


def redact(text: str) -> str:
    """`text` with the secret of every URL in it masked: its password
    (scheme://user:***@host), or a user part that has none, a token (scheme://***@host)."""
    def masked(m) -> str:
        user, colon, _ = m["userinfo"].partition(":")
        return f"{m['head']}{user}:{MASK}@" if colon else f"{m['head']}{MASK}@"

    return _USERINFO.sub(masked, str(text))


def split_secrets(data) -> tuple[object, list[list]]:
    """`data` (JSON: dicts, lists, strings) with every string holding a URL secret
    masked (`redact`), and those strings as they were, each as [its path of keys
    and indices, the string]: what a record readable by every user keeps apart
    from what only its owner may read (`with_secrets` puts them back)."""
    hidden: list[list] = []

    def walk(value, path):
        if isinstance(value, dict):
            return {k: walk(v, [*path, k]) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, [*path, i]) for i, v in enumerate(value)]
        if isinstance(value, str) and redact(value) != value:
            hidden.append([path, value])
            return redact(value)
        return value

    return walk(data, []), hidden


def with_secrets(data, hidden: list[list]):
    """`data` with each string `split_secrets` masked put back where the masked one
    still stands; returns it, and the paths (dotted) of those still masked where
    `hidden` lacks them."""
    def at(value, path):
        for key in path:
            value = value[key]
        return value

    for path, value in hidden:
        try:
            parent = at(data, path[:-1])
            if parent[path[-1]] == redact(value):
                parent[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    still: list[str] = []

    def walk(value, path):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, [*path, str(k)])
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, [*path, str(i)])
        elif isinstance(value, str) and (f":{MASK}@" in value or f"://{MASK}@" in value):
            still.append(".".join(path))

    walk(data, [])
    return data, still


# The tool's own symbols as an ASCII console shows them; any other character it lacks: '?'.
_PLAIN = str.maketrans({"\u00b7": "-", "\u2026": "...", "\u2014": "-", "\u2013": "-", "\u2192": "->",
                        "\u00d7": "x", "\u2265": ">=", "\u2264": "<=", "\u2248": "~", "\u2212": "-", "\u00b1": "+/-"})


class Console:
    """A console stream as the tool writes to it (sys.stdout, sys.stderr): every
    URL's secret masked (`redact`), a character its encoding lacks replaced (an
    ASCII console: '?'), and a reader gone (`launch | head -2`) taken as a console
    that is closed: what follows is dropped, and the sweep goes on (issue 83,
    classes 6 and 7). It has no `buffer`, so that click writes through it."""

    def __init__(self, stream):
        self.stream, self.closed_by_reader = stream, False

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if self.closed_by_reader:
            return len(text)
        shown = redact(text)
        try:
            try:
                self.stream.write(shown)
            except UnicodeEncodeError:
                encoding = getattr(self.stream, "encoding", None) or "ascii"
                plain = shown.translate(_PLAIN)
                self.stream.write(plain.encode(encoding, "replace").decode(encoding))
        except BrokenPipeError:
            self._reader_gone()
        return len(text)

    def flush(self) -> None:
        if self.closed_by_reader:
            return
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._reader_gone()

    def _reader_gone(self) -> None:
        """The reader of a pipe left: its descriptor points at /dev/null from now on,
        so that neither this process's last flush nor a child's write fails."""
        import os

        self.closed_by_reader = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass

    @property
    def errors(self) -> str:
        return "replace"

    def __getattr__(self, name):  # isatty, fileno, encoding, ...: the stream's
        if name == "buffer":
            raise AttributeError(name)
        return getattr(self.stream, name)


def guard_console() -> None:
    """sys.stdout and sys.stderr as `Console`s (once)."""
    import sys

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, Console):
            setattr(sys, name, Console(stream))


class NotAURL(ValueError):
    """A URL the tool was given is none it can ask (no http(s) scheme, no host)."""


def parts(url: str) -> tuple[str, Optional[tuple[str, str]]]:
    """`url` without its user info, and that user info ((user, password) or None):
    the credentials travel as a header to that host alone, never in the URL.
    NotAURL where it has no http(s) scheme or no host."""
    split = urlsplit(url)
    if split.scheme not in ("http", "https") or not split.hostname:
        raise NotAURL(f"{redact(url)!r} is not an http(s) URL (http://host[:port][/path])")
    try:
        split.port  # a port that is no number
    except ValueError:
        raise NotAURL(f"{redact(url)!r} has a port that is not a number") from None
    netloc = split.hostname if ":" not in split.hostname else f"[{split.hostname}]"
    netloc += f":{split.port}" if split.port else ""
    user = (split.username or "", split.password or "") if split.username or split.password else None
    return urlunsplit((split.scheme, netloc, split.path, split.query, "")), user


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is answered, not followed: a request carrying a secret goes to the
    host it was meant for and nowhere else."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def ask(url: str, timeout: float, data: Optional[bytes] = None, headers: Optional[dict] = None,
        limit: int = 1 << 16) -> Union[tuple[int, dict, bytes], str]:
    """One HTTP request, its redirects not followed, all of it (connection, headers,
    body up to `limit` bytes) within `timeout` seconds: a server that trickles bytes
    is cut off. Returns (status, headers, body), or why there is none."""
    opener = urllib.request.build_opener(_NoRedirect)
    request = urllib.request.Request(url, data=data, headers=headers or {})
    outcome: list = []

    def run():
        try:
            with opener.open(request, timeout=timeout) as answer:
                outcome.append((answer.status, dict(answer.headers), answer.read(limit)))
        except urllib.error.HTTPError as e:  # an answer: 3xx (not followed), 4xx, 5xx
            body = b""
            try:
                body = e.read(limit)
            except Exception:
                pass
            outcome.append((e.code, dict(e.headers or {}), body))
        except Exception as e:  # no answer: refused, unknown host, TLS, a timeout
            outcome.append(_why(e, timeout))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout)
    return outcome[0] if outcome else _silent(timeout)


def _why(e: Exception, timeout: float) -> str:
    import socket

    reason = getattr(e, "reason", None) or e
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return _silent(timeout)
    return f"cannot be reached ({redact(str(reason))})"


def _silent(timeout: float) -> str:
    return f"did not answer within {timeout:g} s (ICR_STORAGE_TIMEOUT_S sets the wait)"


def where_to(status: int, headers: dict, base: str) -> str:
    """What a redirect answer names, for a message: its Location's host."""
    location = next((v for k, v in headers.items() if k.lower() == "location"), "")
    host = urlsplit(location).hostname or (location or "nowhere")
    same = host == urlsplit(base).hostname
    return f"HTTP {status}, a redirect to {redact(location) if same else host}"
