"""What a program shows in a terminal of a given width: run in a pty of that size,
and the screen a terminal emulator (pyte) draws of its output."""

import os
import subprocess


def in_a_terminal(argv: list[str], columns: int, cwd, timeout: float = 60) -> bytes:
    """What `argv` writes to a terminal of `columns` columns (a pty of that size);
    asserts it exits 0."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    proc = subprocess.Popen(argv, stdin=child, stdout=child, stderr=child, cwd=cwd, env={**env, "TERM": "xterm-256color"})
    os.close(child)
    raw = b""
    while select.select([main], [], [], timeout)[0]:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        raw += chunk
    assert proc.wait(timeout=timeout) == 0, raw.decode(errors="replace")[-2000:]
    return raw


def screen(raw: bytes) -> list[str]:
    """The lines a terminal shows of `raw`, on a screen far wider than the program was
    told, so that a line it wrote too wide shows whole instead of folded."""
    import pyte

    shown = pyte.Screen(400, 200)
    pyte.ByteStream(shown).feed(raw.replace(b"\n", b"\r\n"))
    return [line.rstrip() for line in shown.display if line.strip()]
