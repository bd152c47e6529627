"""SIGTERM as an interrupt: a service manager's stop unwinds the command as Ctrl-C does.

Python's default for SIGTERM ends the process on the spot: a temporary output file was left
behind, and a live session (``stream``, ``listen``) lost the command under way and its learned
token map, which Ctrl-C keeps. Raised where the main thread is, ``Terminated`` unwinds through
the same ``finally`` blocks; the live commands catch it where they catch ``KeyboardInterrupt``.
"""

from __future__ import annotations

import signal
import threading


class Terminated(BaseException):
    """SIGTERM, raised where the main thread is, so that it unwinds as an interrupt does."""


def on_sigterm_unwind():
    """Make SIGTERM raise ``Terminated`` in the main thread; returns the handler it replaced,
    None where it cannot (not the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def unwind(signum, frame):
        raise Terminated()

    return signal.signal(signal.SIGTERM, unwind)
