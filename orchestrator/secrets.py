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

# scheme://user:password@ anywhere in a text: the password is masked, the rest kept
_USERINFO = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*:)(?P<password>[^\s@/]+)(?P<at>@)")


def command(*words: str) -> str:
    """A command line to print for the user to paste: each word quoted for the shell
    (a path holding `$(...)`, spaces or quotes runs nothing), its secrets masked."""
    import shlex

    return " ".join(shlex.quote(redact(str(w))) for w in words)


def redact(text: str) -> str:
    """`text` with the password of every URL in it masked (scheme://user:***@host)."""
    return _USERINFO.sub(lambda m: f"{m['head']}***{m['at']}", str(text))


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
