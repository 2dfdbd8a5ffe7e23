"""How a job stops: SIGINT (Ctrl-C) and SIGTERM (``ray job stop``) become a clean cancellation.

The driver turns either signal into ``KeyboardInterrupt`` (`cancel_on_signals`), cancels the
parts in flight, and raises `IngestCancelled`, which says how many parts are kept: a re-run of
the same job redoes only the others. No Ray here: the driver installs the handlers after
``ray.init``, whose crash handlers would otherwise take SIGTERM.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType

__all__ = ["IngestCancelled", "cancel_on_signals"]


class IngestCancelled(KeyboardInterrupt):
    """The job was interrupted (Ctrl-C, SIGTERM from ``ray job stop``); in-flight parts were
    cancelled. ``written`` parts of ``total`` are kept; a re-run of the same job redoes only the
    others. A subclass of ``KeyboardInterrupt``, so ``except Exception`` does not swallow it.

    Attributes:
        written: Parts whose completion record was written before the interruption.
        total: Parts of the job's plan.
    """

    def __init__(self, written: int, total: int) -> None:
        """Raised by `ingest_dataset`; there is no need to build one yourself.

        Args:
            written: Parts written and kept.
            total: Parts of the job's plan.
        """
        self.written, self.total = written, total
        super().__init__(
            f"interrupted: {written} of {total} parts are written and kept; run the same command "
            f"again to finish the other {total - written} (nothing is committed until all are)"
        )

    def __str__(self) -> str:
        return str(self.args[0])


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def cancel_on_signals() -> Callable[[], None]:
    """SIGINT and SIGTERM (``ray job stop``) raise KeyboardInterrupt in the driver, so that the
    parts in flight are cancelled cleanly. Returns the function that restores the previous
    handlers; outside the main thread (where handlers cannot be set) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupt)

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    return restore
