"""The form of a user's hook: a dotted path ("package.module:function"), checked without importing
it, so the config check (trainer_module/settings.py) and the pipeline's can refuse a malformed
one before anything runs. Loading and checking the hook itself is trainer_module/hooks.py's."""

from __future__ import annotations

import re

MODEL_KEY, LOSS_KEY, PREPROCESSING_KEY = "trainer.model", "trainer.loss", "transform.preprocessing_fn"
_DOTTED = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*([:.][A-Za-z_][\w]*)$")


class HookError(ValueError):
    """A hook that cannot be used; the message is one line naming the key and the reason."""


def check_path(key: str, path: str) -> None:
    """The form only, without importing: "package.module:name" (or "package.module.name")."""
    if path and not _DOTTED.match(path):
        raise HookError(f"{key}: {path!r} is not a dotted path like 'package.module:function'")


def split(path: str) -> tuple[str, str]:
    """(module, name) of a dotted path."""
    module, sep, name = path.partition(":")
    return (module, name) if sep else tuple(path.rsplit(".", 1))  # type: ignore[return-value]
