"""The flodl log records a Monitor keeps for its text log (``Monitor.write_log``)."""

from __future__ import annotations

import collections
import logging
import time


class MessageLog(logging.Handler):
    """Keeps the last ``limit`` records logged under ``flodl`` as text lines.

    It sees exactly the records flodl's loggers emit at the current verbosity (see
    :mod:`flodl.log`): nothing below WARNING by default.

    >>> import logging, time
    >>> log = MessageLog(time.monotonic())
    >>> log.attach()
    >>> logging.getLogger("flodl.train").warning("rank 1 is slow")
    >>> log.detach()
    >>> log.lines()[0].split(None, 1)[1]
    'WARNING flodl.train: rank 1 is slow'
    """

    def __init__(self, started: float, limit: int = 10_000) -> None:
        super().__init__()
        self.started = started
        self._lines: collections.deque[str] = collections.deque(maxlen=limit)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            elapsed = time.monotonic() - self.started
            rank = getattr(record, "rank", None)
            where = f"[rank {rank}] " if rank is not None else ""
            text = f"{elapsed:9.3f}s {record.levelname} {where}{record.name}: {record.getMessage()}"
            self._lines.append(text.replace("\n", " "))
        except Exception:  # a broken record must never break training
            self.handleError(record)

    def lines(self) -> list[str]:
        return list(self._lines)

    def attach(self) -> None:
        logging.getLogger("flodl").addHandler(self)

    def detach(self) -> None:
        logging.getLogger("flodl").removeHandler(self)
