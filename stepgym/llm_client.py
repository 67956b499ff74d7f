"""One client for OpenAI-compatible chat-completions servers (vLLM, SGLang, llama.cpp, hosted APIs).

Two parts of stepgym talk to such a server: the AHEAD analyzer (:class:`stepgym.wrappers.hints.LLMAnalyzer`) and
the evaluation / rollout backend (:mod:`stepgym.llm_eval`). They share this client so that settings, retries and
error messages follow one rule. HTTP is done by ``httpx`` (extra ``stepgym[llm]``), which brings what users of
these servers expect from a client library: connection pooling across threads, the standard proxy and CA
variables (``HTTPS_PROXY``, ``SSL_CERT_FILE``, ...), per-phase timeouts.

The rule, once:

* settings come from the argument, else ``STEPGYM_LLM_BASE_URL`` / ``OPENAI_BASE_URL``, ``STEPGYM_LLM_MODEL``,
  ``STEPGYM_LLM_API_KEY`` / ``OPENAI_API_KEY``;
* connection errors, timeouts, HTTP 429 and 5xx, bodies that are not a chat completion, and replies the caller's
  ``parse`` rejects (``ValueError``) are retried ``max_retries`` times, waiting ``backoff * 2**i`` seconds (capped
  at ``max_backoff``) or the server's ``Retry-After``;
* any other 4xx (bad key, unknown model, bad request) is a configuration error, raised at once
  (:class:`LLMConfigError`), because no retry can fix it;
* when every attempt failed, :class:`LLMUnavailableError` names the URL, the model and the last error.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from stepgym.errors import ServiceUnavailableError, StepGymError

__all__ = [
    "ChatClient",
    "ChatReply",
    "LLMConfigError",
    "LLMUnavailableError",
    "resolve_settings",
]

T = TypeVar("T")


class LLMUnavailableError(ServiceUnavailableError):
    """The server gave no usable answer after every retry (down, timeouts, 429/5xx, garbage).

    ``attempts`` is how many requests were made, ``last_error`` what went wrong the last time.
    """

    abort_cause = "hint_llm_unavailable"  # an episode it cuts off (a hint / analyzer call) is aborted

    def __init__(self, message: str, *, attempts: int = 0, last_error: str = "") -> None:
        super().__init__(message)
        self.attempts = attempts
        self.last_error = last_error


class LLMConfigError(StepGymError, ValueError):
    """The client is misconfigured: no base URL or model, or the server refused the request (a 4xx other than
    429: bad key, unknown model, malformed request)."""


@dataclass(frozen=True)
class ChatReply:
    """One chat completion: the reply text, why generation stopped, and the token usage the server reported
    (0 when it reports none)."""

    content: str
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


def resolve_settings(
    base_url: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
    *,
    require_model: bool = True,
) -> tuple[str, str, str | None]:
    """``(base_url, model, api_key)`` from the arguments, else the environment (see the module docstring).

    Raises :class:`LLMConfigError` naming the variable to set when the URL or (``require_model``) the model is
    missing; without ``require_model`` a missing model is ``""``.
    """
    base_url = base_url or os.environ.get("STEPGYM_LLM_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
    model = model or os.environ.get("STEPGYM_LLM_MODEL")
    api_key = api_key or os.environ.get("STEPGYM_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY")
    if not base_url:
        raise LLMConfigError(
            "no server base URL: pass base_url='http://host:port/v1' (--base-url) or set STEPGYM_LLM_BASE_URL "
            "or OPENAI_BASE_URL"
        )
    if not model and require_model:
        raise LLMConfigError("no model name: pass model=... (--model) or set STEPGYM_LLM_MODEL")
    return base_url.rstrip("/"), model or "", api_key or None


def _clip(text: Any, n: int = 200) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= n else s[: n - 1] + "…"


class _Retriable(Exception):
    """One attempt failed in a way a retry can fix; ``args[1]`` is the server's Retry-After, if any."""


def _retry_after(headers: Mapping[str, str]) -> float | None:
    try:
        value = headers.get("Retry-After")
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None


class ChatClient:
    """A thread-safe chat-completions client with retries (see the module docstring for the rules).

    Args:
        base_url, model, api_key: see :func:`resolve_settings`. ``base_url`` is the API root
            (``http://host:8000/v1``); a URL ending in ``/chat/completions`` is accepted too.
        timeout: seconds per request phase (connect, send, wait for the answer).
        max_retries: retries after the first attempt (0: a single attempt).
        backoff, max_backoff: the exponential back-off between attempts.
        max_connections: connections kept open to the server (set it to the number of requests in flight).
        sleep: how to wait between attempts (tests pass a recorder).
        discover_model: accept a missing model name; :meth:`use_only_served_model` then asks the server.
    """

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        max_connections: int = 16,
        sleep: Callable[[float], None] = time.sleep,
        discover_model: bool = False,
    ) -> None:
        from stepgym import _deps

        httpx = _deps.require("httpx", "llm", what="OpenAI-compatible endpoints")
        if max_retries < 0 or timeout <= 0:
            raise LLMConfigError(
                f"max_retries must be >= 0 and timeout > 0, got {max_retries} and {timeout:g}"
            )
        base, self.model, self.api_key = resolve_settings(
            base_url, model, api_key, require_model=not discover_model
        )
        self.base_url = base.removesuffix("/chat/completions")
        self.url = self.base_url + "/chat/completions"
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self._sleep = sleep
        self._httpx = httpx
        headers = {"Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        n = max(1, int(max_connections))
        self._http = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(self.timeout),
            limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
        )
        self._lock = threading.Lock()
        self.stats = {"requests": 0, "retries": 0, "prompt_tokens": 0, "completion_tokens": 0}

    # -- lifecycle -----------------------------------------------------------------------------------------
    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.stats[key] += n

    # -- one attempt ---------------------------------------------------------------------------------------
    def _config_error(self, code: int, detail: str) -> LLMConfigError:
        return LLMConfigError(
            f"the LLM server at {self.url} refused the request with HTTP {code}: {detail} (check the base URL, "
            f"the model name {self.model!r} and the API key: STEPGYM_LLM_BASE_URL / OPENAI_BASE_URL, "
            "STEPGYM_LLM_MODEL, STEPGYM_LLM_API_KEY / OPENAI_API_KEY)"
        )

    def _post(self, body: dict[str, Any]) -> ChatReply:
        httpx = self._httpx
        self._count("requests")
        try:
            resp = self._http.post(self.url, json=body)
        except httpx.TimeoutException as exc:
            raise _Retriable(f"no answer within {self.timeout:g} s ({type(exc).__name__})", None) from None
        except httpx.ConnectError as exc:
            raise _Retriable(f"cannot connect ({exc})", None) from None
        except httpx.TransportError as exc:  # dropped connection, protocol error, ...
            raise _Retriable(f"connection failed ({type(exc).__name__}: {exc})", None) from None
        if resp.status_code == 429 or resp.status_code >= 500:
            raise _Retriable(f"HTTP {resp.status_code} {_clip(resp.text)}", _retry_after(resp.headers))
        if resp.status_code >= 400:
            raise self._config_error(resp.status_code, _clip(resp.text))
        try:
            payload = resp.json()
            choice = payload["choices"][0]
            content = choice["message"]["content"]
            usage = payload.get("usage") or {}
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise _Retriable(
                f"the body is not a chat completion ({type(exc).__name__}): {_clip(resp.text[:300])!r}", None
            ) from None
        reply = ChatReply(
            content if isinstance(content, str) else "",
            choice.get("finish_reason"),
            int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0),
        )
        self._count("prompt_tokens", reply.prompt_tokens)
        self._count("completion_tokens", reply.completion_tokens)
        return reply

    # -- the public calls ----------------------------------------------------------------------------------
    def chat(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        parse: Callable[[ChatReply], T] | None = None,
        **params: Any,
    ) -> Any:
        """POST ``messages`` (plus ``params``: temperature, max_tokens, top_p, seed, stop, response_format, ...)
        and return the :class:`ChatReply`, or ``parse(reply)`` when ``parse`` is given; a ``ValueError`` from
        ``parse`` counts as a failed attempt. Retries as described in the module docstring."""
        body = {"model": self.model, "messages": list(messages), **params}
        last = ""
        for attempt in range(self.max_retries + 1):
            wait: float | None = None
            try:
                reply = self._post(body)
                return parse(reply) if parse is not None else reply
            except _Retriable as exc:
                last, wait = str(exc.args[0]), exc.args[1]
            except ValueError as exc:
                if isinstance(exc, LLMConfigError):
                    raise
                last = str(exc)
            if attempt < self.max_retries:
                self._count("retries")
                delay = min(self.max_backoff, self.backoff * 2**attempt)
                self._sleep(min(self.max_backoff, wait) if wait is not None else delay)
        raise LLMUnavailableError(
            f"the LLM server at {self.url} (model {self.model!r}) gave no usable answer after "
            f"{self.max_retries + 1} attempt(s); last error: {last}",
            attempts=self.max_retries + 1,
            last_error=last,
        )

    def served_models(self) -> list[dict[str, Any]]:
        """The entries of ``GET {base_url}/models`` (each with an ``id``; vLLM and SGLang add ``root``, the weights'
        path or hub id). ``[]`` when the server has no such route (404), is busy (429/5xx: the chat requests retry)
        or answers something else. Raises :class:`LLMUnavailableError` when the server cannot be reached and
        :class:`LLMConfigError` when it refuses the request."""
        httpx = self._httpx
        try:
            resp = self._http.get(self.base_url + "/models")
        except httpx.TransportError as exc:
            raise LLMUnavailableError(
                f"cannot reach the LLM server at {self.base_url} ({type(exc).__name__}: {exc}); is it running? "
                "Check --base-url / OPENAI_BASE_URL",
                attempts=1,
                last_error=str(exc),
            ) from None
        if resp.status_code == 404 or resp.status_code == 429 or resp.status_code >= 500:
            return []
        if resp.status_code >= 400:
            raise self._config_error(resp.status_code, _clip(resp.text))
        try:
            entries = [dict(m) for m in resp.json()["data"] if "id" in m]
        except (ValueError, KeyError, TypeError, AttributeError):
            return []
        return entries

    def check_model(self, entries: Sequence[Mapping[str, Any]] | None = None) -> list[str]:
        """Fail early and clearly: check that the model is among the server's :meth:`served_models` (``entries``
        when the caller already fetched them).

        Returns the served model ids. Raises :class:`LLMUnavailableError` when the server cannot be reached and
        :class:`LLMConfigError` when it refuses the request or does not list the model. A server without the
        ``/models`` route (404) is not an error: the first chat request will tell.
        """
        served = [str(m["id"]) for m in (self.served_models() if entries is None else entries)]
        if served and self.model not in served:
            raise LLMConfigError(
                f"the LLM server at {self.base_url} does not serve model {self.model!r}; it serves: "
                f"{', '.join(served[:10])}. Pass one of them with --model (or STEPGYM_LLM_MODEL)"
            )
        return served

    def use_only_served_model(self) -> str:
        """Set :attr:`model` to the one model the server serves (for a client built without a model name).

        Raises :class:`LLMConfigError` listing the models when the server serves several (or none, or cannot
        list them), since picking one would be a guess."""
        served = [str(m["id"]) for m in self.served_models()]
        if len(served) != 1:
            listed = f"it serves {len(served)}: {', '.join(served[:10])}" if served else "it lists no model"
            raise LLMConfigError(
                f"no model name given and the LLM server at {self.base_url} cannot name one ({listed}); "
                "pass one with --model NAME (or STEPGYM_LLM_MODEL)"
            )
        self.model = served[0]
        return self.model
