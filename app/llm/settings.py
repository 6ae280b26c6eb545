"""Endpoint settings for LLM agents: where to send requests, which model, how much to spend.

The API key is not a field: it is looked up when a client is made (environment first, then the
OS keyring when the optional `keyring` package is installed) and never stored in settings,
dictionaries, reprs, the database, logs or exports.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from app.goal.tables import API_KEY_ENV, LLMTable
from app.llm import spending

KEY_ENV_VARS = (API_KEY_ENV, "OPENAI_API_KEY")
KEYRING_SERVICE = "kernelswarm"
KEYRING_USER = "llm-api-key"
ROLES = ("memory", "tiling", "fixer")
# How long a reasoning model may think, sent as `reasoning_effort` ("" sends nothing: the
# endpoint's default). Ordered from cheapest to dearest (a goal may only lower it).
REASONING_EFFORTS = ("minimal", "low", "medium", "high")
# Settings readable from the environment (KERNELSWARM_LLM_<FIELD>), e.g. for the CLI.
ENV_PREFIX = "KERNELSWARM_LLM_"
# Local servers (vLLM, Ollama, LM Studio) usually take any key; the openai client needs one.
LOCAL_PLACEHOLDER_KEY = "no-key-needed"


class LLMSettingsError(ValueError):
    """An LLM setting is invalid; `field` names it."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"llm.{field_name}: {problem}")
        self.field = field_name
        self.problem = problem


@dataclass
class LLMSettings:
    base_url: str = "https://api.openai.com/v1"
    model: str = "gpt-4o-mini"
    timeout_s: float = 120.0  # one request, start to last byte
    max_concurrent: int = 2  # requests in flight across all LLM agents of a run
    max_tokens: int = 4096  # cap on one reply (endless replies are cut here)
    temperature: float = 0.7
    max_retries: int = 4  # on 429, 5xx, connection errors and timeouts
    backoff_s: float = 1.0  # first retry delay; doubles per retry (Retry-After wins)
    max_backoff_s: float = 30.0
    run_token_budget: int = 400_000  # prompt + completion tokens per run; 0: no cap
    run_cost_budget: float = 0.0  # in the price unit below (e.g. USD) per run; 0: no cap
    price_prompt_per_mtok: float = 0.0  # cost per million prompt tokens
    price_completion_per_mtok: float = 0.0
    roles: list[str] = field(default_factory=lambda: list(ROLES))
    stream: bool = True  # streaming lets an endless reply be cut by length and wall time
    reasoning_effort: str = ""  # one of REASONING_EFFORTS, or "" for the endpoint's default

    # ---- validation ----------------------------------------------------------------------
    def validate(self) -> LLMSettings:
        url = urlparse(self.base_url or "")
        if url.scheme not in ("http", "https") or not url.netloc:
            raise LLMSettingsError("base_url", f"{self.base_url!r} is not an http(s) URL, "
                                   "e.g. https://api.openai.com/v1 or http://127.0.0.1:11434/v1")
        if url.scheme == "http" and not is_loopback(self.base_url):
            raise LLMSettingsError("base_url", f"{self.base_url!r}: plain http is allowed only to "
                                   "this machine (127.0.0.0/8, ::1, localhost): the API key and "
                                   "prompts would cross the network unencrypted; use https")
        if not isinstance(self.model, str) or not self.model.strip():
            raise LLMSettingsError("model", "name the model, e.g. gpt-4o-mini or qwen2.5-coder")
        for name, lo in (("timeout_s", 0.1), ("backoff_s", 0.0), ("max_backoff_s", 0.0),
                         ("run_cost_budget", 0.0), ("price_prompt_per_mtok", 0.0),
                         ("price_completion_per_mtok", 0.0), ("temperature", 0.0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < lo:
                raise LLMSettingsError(name, f"must be a number >= {lo}")
        for name, lo in (("max_concurrent", 1), ("max_tokens", 16), ("max_retries", 0),
                         ("run_token_budget", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise LLMSettingsError(name, f"must be an integer >= {lo}")
        if self.reasoning_effort not in ("", *REASONING_EFFORTS):
            raise LLMSettingsError("reasoning_effort", f"{self.reasoning_effort!r}: choose one of "
                                   f"{', '.join(REASONING_EFFORTS)} (or leave it empty)")
        if not self.roles:
            raise LLMSettingsError("roles", f"choose at least one of {', '.join(ROLES)}")
        for r in self.roles:
            if r not in ROLES:
                raise LLMSettingsError("roles", f"unknown role {r!r}; known: {', '.join(ROLES)}")
        return self

    @property
    def is_local(self) -> bool:
        return is_loopback(self.base_url)

    # ---- dictionaries (never carry the key) ---------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LLMSettings:
        known = {f.name for f in fields(cls)}
        for k in data:
            if k in ("api_key", "key"):
                raise LLMSettingsError(k, "the API key is never kept in settings files; set "
                                       f"{KEY_ENV_VARS[0]} or store it in the OS keyring")
            if k not in known:
                raise LLMSettingsError(k, f"unknown setting; known: {', '.join(sorted(known))}")
        return cls(**data).validate()

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, base: LLMSettings | None = None
                 ) -> LLMSettings:
        """Settings overridden by KERNELSWARM_LLM_BASE_URL, _MODEL, _TIMEOUT_S, ... variables."""
        env = os.environ if env is None else env
        data = (base or cls()).to_dict()
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is None:
                continue
            current = data[f.name]
            try:
                if isinstance(current, bool):
                    data[f.name] = raw.strip().lower() in ("1", "true", "yes", "on")
                elif isinstance(current, int):
                    data[f.name] = int(raw)
                elif isinstance(current, float):
                    data[f.name] = float(raw)
                elif isinstance(current, list):
                    data[f.name] = [r.strip() for r in raw.split(",") if r.strip()]
                else:
                    data[f.name] = raw.strip()
            except ValueError:
                raise LLMSettingsError(f.name, f"{ENV_PREFIX + f.name.upper()}={raw!r} is not "
                                       f"a {type(current).__name__}") from None
        return cls(**data).validate()

    def save(self, path: str | Path) -> None:
        """Write the settings as TOML (an [llm] table; never a key), atomically."""
        import tomli_w

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(tomli_w.dumps({"llm": self.validate().to_dict()}), encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def user(cls, path: str | Path | None = None) -> LLMSettings:
        """The user's settings (saved from the GUI's settings page), or the defaults."""
        path = Path(path) if path is not None else user_settings_path()
        return cls.load(path) if path.exists() else cls()

    @classmethod
    def load(cls, path: str | Path) -> LLMSettings:
        """Settings from a TOML file (a bare table or an [llm] table)."""
        import tomllib

        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise LLMSettingsError("file", f"settings file {str(path)!r} does not exist") from None
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise LLMSettingsError("file", f"cannot read settings file {str(path)!r}: {exc}") from None
        return cls.from_dict(data.get("llm", data))


def is_loopback(base_url: str) -> bool:
    """Whether a URL names this machine: 127.0.0.0/8, ::1 or localhost."""
    import ipaddress

    host = (urlparse(base_url or "").hostname or "").lower().rstrip(".")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# ---- which endpoint may receive the key ---------------------------------------------------
# The key goes only to the endpoint the user configured (saved settings, KERNELSWARM_LLM_*
# variables, or a URL the user typed / confirmed). A goal file is shared data: its [llm]
# base_url is honoured only when it is that endpoint or the user approved it for this session.
APPROVED_ENV = "KERNELSWARM_LLM_APPROVED_ENDPOINTS"  # space-separated; inherited by engine processes


class EndpointNotTrusted(LLMSettingsError):
    """A goal's [llm] base_url differs from the user's configured endpoint."""

    def __init__(self, goal_url: str, user_url: str) -> None:
        super().__init__("base_url", endpoint_refusal(goal_url, user_url))
        self.goal_url = goal_url
        self.user_url = user_url


def endpoint_refusal(goal_url: str, user_url: str) -> str:
    return (f"the goal's [llm] base_url {goal_url!r} is not your configured endpoint "
            f"{user_url!r}; the API key is sent only to your own endpoint")


def _same_endpoint(a: str, b: str) -> bool:
    def norm(u: str) -> tuple[str, str, int | None, str]:
        p = urlparse((u or "").strip())
        port = p.port or (443 if p.scheme == "https" else 80 if p.scheme == "http" else None)
        return (p.scheme.lower(), (p.hostname or "").lower().rstrip("."), port,
                p.path.rstrip("/"))
    try:
        return norm(a) == norm(b)
    except ValueError:  # a malformed port
        return False


def user_endpoint_settings(env: dict[str, str] | None = None,
                           path: str | Path | None = None) -> LLMSettings:
    """The user's own settings: the saved file, overridden by KERNELSWARM_LLM_* variables."""
    return LLMSettings.from_env(env, base=LLMSettings.user(path))


def approve_endpoint(url: str, env: dict[str, str] | None = None) -> None:
    """Record that the user approved sending the key to `url` (CLI --trust-goal-endpoint, GUI
    confirmation). Kept in this process's environment, so an engine process it spawns sees it."""
    env = os.environ if env is None else env
    approved = env.get(APPROVED_ENV, "").split()
    if url not in approved:
        env[APPROVED_ENV] = " ".join([*approved, url])


def _approved(url: str, env: dict[str, str]) -> bool:
    return any(_same_endpoint(url, a) for a in env.get(APPROVED_ENV, "").split())


def endpoint_needs_confirmation(goal_llm: Mapping[str, Any] | None, user_settings: LLMSettings,
                                env: dict[str, str] | None = None) -> str | None:
    """A sentence to show the user when a goal's [llm] base_url would send the key somewhere
    other than their configured endpoint (and they have not approved it yet); None when not.
    The GUI asks for confirmation with it and then calls approve_endpoint(url)."""
    env = os.environ if env is None else env
    goal_url = str((goal_llm or {}).get("base_url") or "").strip()
    if not goal_url or _same_endpoint(goal_url, user_settings.base_url) or _approved(goal_url, env):
        return None
    return endpoint_refusal(goal_url, user_settings.base_url)


def run_settings(goal_llm: LLMTable | Mapping[str, Any] | None, *,
                 env: dict[str, str] | None = None, user: LLMSettings | None = None) -> LLMSettings:
    """The settings a run uses: the user's saved settings, then the goal's [llm] table (what
    it sets: an LLMTable reads as that mapping), then KERNELSWARM_LLM_* variables. Raises
    EndpointNotTrusted when the goal's base_url is not the user's endpoint and was not
    approved."""
    env = os.environ if env is None else env
    user = user if user is not None else LLMSettings.user()
    own = LLMSettings.from_env(env, base=user)
    goal_llm = dict(goal_llm or {})
    if endpoint_needs_confirmation(goal_llm, own, env) is not None:
        raise EndpointNotTrusted(str(goal_llm["base_url"]), own.base_url)
    raised = spending.needs_confirmation(goal_llm, own, env)
    if raised is not None:
        raise SpendingNotApproved(raised)
    merged = LLMSettings.from_dict({**user.to_dict(), **goal_llm})
    settings = LLMSettings.from_env(env, base=merged)
    goal_url = str(goal_llm.get("base_url") or "").strip()
    if goal_url and not _same_endpoint(goal_url, own.base_url):
        settings.base_url = goal_url  # approved explicitly: it wins over the variables
    for name in spending.GUARDED:  # lowered (or approved): the goal's value wins over variables
        if name in goal_llm:
            setattr(settings, name, goal_llm[name])
    return settings.validate()


class SpendingNotApproved(LLMSettingsError):
    """A goal's [llm] table raises the user's spending (budget, model, ...) unapproved."""

    def __init__(self, lines: str) -> None:
        name, _, problem = lines.partition(": ")
        super().__init__(name.removeprefix("llm."), problem)
        self.args = (lines,)


def user_settings_path() -> Path:
    """Where the GUI keeps the user's endpoint settings (the key is never in it)."""
    import platformdirs

    return Path(platformdirs.user_config_dir("kernelswarm", appauthor=False)) / "llm.toml"


def api_key_source(env: dict[str, str] | None = None) -> str:
    """Where the key would come from, for display: a variable's name, "OS keyring" or ""."""
    env = os.environ if env is None else env
    for name in KEY_ENV_VARS:
        if env.get(name, "").strip():
            return name
    try:
        import keyring  # type: ignore[import-not-found]

        if keyring.get_password(KEYRING_SERVICE, KEYRING_USER):
            return "OS keyring"
    except Exception:  # noqa: BLE001, S110 - no keyring package or no usable backend
        pass
    return ""


def resolve_api_key(settings: LLMSettings | None = None, env: dict[str, str] | None = None) -> str:
    """The API key: environment, then OS keyring; a placeholder for local servers; else ''."""
    env = os.environ if env is None else env
    for name in KEY_ENV_VARS:
        value = env.get(name, "").strip()
        if value:
            return value
    try:  # optional dependency: absent means environment only
        import keyring  # type: ignore[import-not-found]

        value = keyring.get_password(KEYRING_SERVICE, KEYRING_USER) or ""
        if value:
            return value
    except Exception:  # noqa: BLE001, S110 - no keyring, no backend, locked: environment only
        pass
    if settings is not None and settings.is_local:
        return LOCAL_PLACEHOLDER_KEY
    return ""


def store_api_key_in_keyring(key: str) -> None:
    """Save the key in the OS keyring (the GUI's settings page calls this)."""
    try:
        import keyring  # type: ignore[import-not-found]
    except ImportError:
        raise LLMSettingsError("api_key", "the keyring package is not installed; set "
                               f"{KEY_ENV_VARS[0]} in the environment instead") from None
    keyring.set_password(KEYRING_SERVICE, KEYRING_USER, key)


def redact(text: str, key: str) -> str:
    """Text with every occurrence of the key (and its tail, as some servers echo it) masked."""
    if not text or not key or key == LOCAL_PLACEHOLDER_KEY:
        return text
    text = text.replace(key, "[redacted]")
    if len(key) >= 12:
        text = text.replace(key[-8:], "[redacted]")
    return text


def check_goal_settings(goal: Any) -> None:
    """A goal's [llm] table, checked once per run by the session (through the agent registry):
    GoalError naming `llm.<field>`, so a goal file's mistake reads like any other field's. Its
    keys were checked on load (app.goal.tables.LLMTable); a dict set in code is read as one."""
    from app.core.errors import GoalError

    table = goal.llm
    if isinstance(table, dict):
        table = LLMTable.from_table(table)
    if not isinstance(table, LLMTable):
        raise GoalError("llm", "must be a table of LLM endpoint settings")
    try:
        LLMSettings.from_dict(dict(table))
    except LLMSettingsError as exc:
        raise GoalError(f"llm.{exc.field}", exc.problem) from None
    except TypeError as exc:
        raise GoalError("llm", str(exc)) from None
