"""The flodl log records a Monitor keeps for its text log (``Monitor.write_log``)."""

from __future__ import annotations

import collections
import logging
import time


class MessageLog(logging.Handler):
    """Keeps the last ``limit`` records logged under ``flodl`` as text lines.

    It sees exactly the records flodl's loggers emit at the current verbosity (see
    :mod:`flodl.log`): nothing below WARNING by default. Being a handler, it would stop Python
    from printing warnings and errors when nobody configured logging (Python prints them only
    when no handler at all is found): so a record that no other handler takes goes on to
    :data:`logging.lastResort`, exactly as it would without a Monitor. Other MessageLogs (a
    second Monitor open) keep lines too and print nothing: the first of them to see the record
    passes it on, once.

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
        last = logging.lastResort
        if last is not None and record.levelno >= last.level and not self._others_take(record):
            last.handle(record)

    def _others_take(self, record: logging.LogRecord) -> bool:
        """Whether a handler besides this one prints ``record`` or passes it on
        (logging.Logger.callHandlers' walk up the hierarchy): any handler but a MessageLog, or
        a MessageLog called before this one."""
        logger: logging.Logger | None = logging.getLogger(record.name)
        keeper: MessageLog | None = None  # the first MessageLog called: it passes the record on
        while logger is not None:
            for handler in logger.handlers:
                if not isinstance(handler, MessageLog):
                    return True
                keeper = keeper or handler
            if not logger.propagate:
                break
            logger = logger.parent
        return keeper is not None and keeper is not self

    def lines(self) -> list[str]:
        return list(self._lines)

    def attach(self) -> None:
        logging.getLogger("flodl").addHandler(self)

    def detach(self) -> None:
        logging.getLogger("flodl").removeHandler(self)
