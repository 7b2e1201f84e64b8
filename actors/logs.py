"""Logging for every process of a runtime, set from the environment of the owner.

- ``GREENROOM_LOG_LEVEL`` (default ``WARNING``): the level of greenroom's own loggers
  (``greenroom.*``); at ``INFO`` one line per turn start, finish, approval, stop and
  cancel, at ``DEBUG`` each message a TurnActor handles;
- ``GREENROOM_LOG_FILE``: append there instead of standard error;
- third-party loggers (Thespian, httpx, httpcore) stay at ``WARNING``, or at
  ``GREENROOM_LOG_THIRD_PARTY`` when that is set.

Actor processes log through Thespian's logging process, configured with ``log_defs()``.
Thespian replaces the logging manager in every actor process, so loggers are looked up
when used (``logging.getLogger(...)`` inside functions), never kept from before a fork.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Any

__all__ = ["log_defs", "logger", "quiet_third_party"]

THIRD_PARTY = ("httpx", "httpcore", "hpack", "asyncio", "urllib3")


def logger(name: str) -> Callable[[], logging.Logger]:
    """``log = logger("greenroom.x")``, then ``log().info(...)``: the logger is looked up at
    each use, since Thespian replaces the logging manager in every actor process and a
    logger kept from before a fork logs nowhere."""
    return functools.partial(logging.getLogger, name)


def log_defs() -> dict[str, Any]:
    """A ``logging.config.dictConfig`` mapping for the runtime's processes."""
    level = os.environ.get("GREENROOM_LOG_LEVEL", "WARNING").upper()
    others = os.environ.get("GREENROOM_LOG_THIRD_PARTY", "WARNING").upper()
    handler: dict[str, Any] = {"class": "logging.StreamHandler", "formatter": "plain"}
    if os.environ.get("GREENROOM_LOG_FILE"):
        handler = {"class": "logging.FileHandler", "filename": os.environ["GREENROOM_LOG_FILE"], "formatter": "plain"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"}},
        "handlers": {"out": handler},
        "loggers": {"greenroom": {"level": level, "handlers": ["out"], "propagate": False}},
        "root": {"handlers": ["out"], "level": others},
    }


def quiet_third_party() -> None:
    """In an actor process: hold third-party loggers at ``GREENROOM_LOG_THIRD_PARTY``.

    Thespian forwards every record at or above the lowest configured level to its logging
    process, which hands it to handlers without checking the logger's level again; so the
    level must be set where the record is made."""
    level = os.environ.get("GREENROOM_LOG_THIRD_PARTY", "WARNING").upper()
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(level)
