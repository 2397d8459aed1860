"""How :class:`~latechunk_dagster.core.engines.vllm_server.VLLMServerEngine` talks to a vLLM
server: :class:`ServerSettings`, the one home of the settings' names, defaults and ranges."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field, fields

#: The numeric settings of :class:`ServerSettings`: ``(type, lowest value, whether the lowest is
#: allowed, how the rule reads)``.
_NUMERIC: dict[str, tuple[type, float, bool, str]] = {
    "max_in_flight": (int, 1, True, "an integer >= 1"),
    "timeout_s": (float, 0, False, "a finite number of seconds > 0"),
    "retries": (int, 0, True, "an integer >= 0"),
    "backoff_s": (float, 0, True, "a finite number of seconds >= 0"),
    "max_inputs_per_request": (int, 1, True, "an integer >= 1"),
    "max_tokens_per_request": (int, 1, True, "an integer >= 1"),
}


def check_server_setting(name: str, value: object, owner: str = "ServerSettings") -> int | float:
    """The numeric setting ``name`` of :class:`ServerSettings` as its type, if ``value`` is in range.

    A number, or its text (an Airflow connection extra typed as a string), is taken; an integer
    setting also takes a float with no fraction (``8.0``). The ranges: ``max_in_flight``,
    ``max_inputs_per_request``, ``max_tokens_per_request`` >= 1; ``retries`` >= 0 (integers);
    ``timeout_s`` > 0 and ``backoff_s`` >= 0 (finite seconds). Out of range, a negative
    ``backoff_s`` failed only at the first retry (``time.sleep``), ``retries=-1`` made no request at
    all, and ``"five"`` failed naming no setting.

    Args:
        owner: how the error names what holds the setting (``"connection 'vllm_default'"``...).

    Raises:
        ValueError: not a number (a bool included), a fraction for an integer setting, not finite,
            or out of range; names ``owner``, the setting and the value.
    """
    kind, lowest, inclusive, rule = _NUMERIC[name]
    number = math.nan  # not a number: refused below (nan is in no range)
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        with contextlib.suppress(ValueError):
            number = float(value)
    in_range = number >= lowest if inclusive else number > lowest
    if not math.isfinite(number) or not in_range or (kind is int and not number.is_integer()):
        raise ValueError(f"{owner}: {name} must be {rule}, got {value!r}")
    return int(number) if kind is int else number


@dataclass(frozen=True)
class ServerSettings:
    """How the engine talks to a vLLM server: the one home of these settings' names and defaults
    (:class:`VLLMServerEngine`, :class:`~latechunk_dagster.RemoteLateChunker` and the Dagster
    ``VLLMServerEngineResource`` take them from here).

    Attributes:
        served_model: model name to send; default: the first model ``/v1/models`` lists.
        max_in_flight: requests sent at the same time (a bounded thread pool); the server batches
            them with its continuous batching.
        timeout_s: timeout of one request in seconds (connect, read, write, pool).
        retries: extra attempts after a connection error, a timeout or a 429/500/502/503/504 answer;
            the wait before attempt ``n`` is ``backoff_s * 2**n`` seconds, times a random 0.5-1.5.
        backoff_s: first wait between attempts, seconds.
        max_inputs_per_request: most prompts in one request.
        max_tokens_per_request: most tokens in one request (a prompt longer than this goes alone).
        api_key: sent as ``Authorization: Bearer ...`` (a server started with ``--api-key``).

    Raises:
        ValueError: a numeric setting out of range or not a number (:func:`check_server_setting`).
    """

    served_model: str | None = None
    max_in_flight: int = 4
    timeout_s: float = 120.0
    retries: int = 4
    backoff_s: float = 0.5
    max_inputs_per_request: int = 32
    max_tokens_per_request: int = 8192
    api_key: str | None = field(default=None, repr=False)  # a credential: never in a repr or a log line

    def __post_init__(self) -> None:
        for name in _NUMERIC:
            object.__setattr__(self, name, check_server_setting(name, getattr(self, name)))

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The setting names, in order."""
        return tuple(f.name for f in fields(cls))
