"""Retries of `exgrpo download`'s fetches: transient failures retried with exponential backoff.

Transient failures (a dropped connection, a time-out, HTTP 429 or 5xx) are retried `RETRIES` times with
exponential backoff (`BACKOFF_S` x 1, 2, 4, ...); then the fetch stops with a `DownloadError` naming the
file and the last error. Permanent ones (HTTP 4xx, a gated model, a checksum mismatch) and a miss of an offline
hub cache are not retried.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from exgrpo.hub.locks import DownloadError

RETRIES = 4
"""Attempts after the first for a transient download failure."""
BACKOFF_S = 2.0
"""First wait between attempts; doubled after each."""
_sleep = time.sleep  # tests replace it


def _transient(err: BaseException) -> bool:
    """Whether a failed fetch is worth retrying: network and time-out errors, HTTP 429 and 5xx."""
    if isinstance(err, DownloadError) or _offline_miss(err):
        return False
    status = getattr(err, "code", None)  # urllib's HTTPError
    response = getattr(err, "response", None)  # requests / huggingface_hub HTTP errors
    status = status if isinstance(status, int) else getattr(response, "status_code", None)
    if isinstance(status, int):
        return status == 429 or status >= 500
    return isinstance(err, (OSError, TimeoutError, ConnectionError))


def _offline_miss(err: BaseException) -> bool:
    """A hub client told not to use the network (HF_HUB_OFFLINE=1, local_files_only) found no cached copy:
    an OSError to Python, but no retry can change the cache (huggingface_hub's LocalEntryNotFoundError and
    OfflineModeIsEnabled)."""
    return any(c.__name__ in ("LocalEntryNotFoundError", "OfflineModeIsEnabled") for c in type(err).__mro__)


def with_retries(fetch: Callable[[], Any], what: str) -> Any:
    """`fetch()`, retried on transient errors with exponential backoff; then a DownloadError naming `what`."""
    for attempt in range(RETRIES + 1):
        try:
            return fetch()
        except Exception as err:
            if _offline_miss(err):
                raise DownloadError(
                    f"{what}: not in the local cache, and the hub is not asked (offline: HF_HUB_OFFLINE=1); "
                    f"{type(err).__name__}: {err}"
                ) from err
            if not _transient(err):
                raise
            if attempt == RETRIES:
                raise DownloadError(
                    f"{what}: download failed after {RETRIES + 1} attempts; last error: "
                    f"{type(err).__name__}: {err}"
                ) from err
            wait = BACKOFF_S * 2**attempt
            print(
                f"{what}: {type(err).__name__}: {err}; retrying in {wait:.0f} s ({attempt + 1}/{RETRIES})",
                file=sys.stderr,
                flush=True,
            )
            _sleep(wait)
    raise AssertionError("unreachable")


__all__ = ["BACKOFF_S", "RETRIES", "with_retries"]
