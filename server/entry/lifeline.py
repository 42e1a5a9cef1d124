"""A child process of the server's parent that ends when its parent does, however the parent ends."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time

log = logging.getLogger("attnserve.server")

PARENT_POLL_S = 0.5  # between a child's looks at its parent pid, where no parent-death signal exists
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def follow_parent(parent: int) -> None:
    """SIGTERM to this process (a drain) when its parent ``parent`` ends, however it ends: a worker
    outliving it would keep the shared ports and claim jobs, the session host its models' memory,
    with no parent to stop them."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):  # no libc to load: the thread below alone notices
            pass
    # Also where the signal is set: a parent that died before it was set sends none.
    threading.Thread(target=_watch_parent, args=(parent,), name="parent-watch", daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    log.error("the parent process (pid %d) is gone: draining", parent)
    os.kill(os.getpid(), signal.SIGTERM)
