"""The user's cache directory: where ilargi_db keeps what it measured or made for this user (the
calibration, the iteration history, the secret that seals stored artifacts), never inside a database.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cache_dir(path: str | os.PathLike | None = None) -> Path:
    """The user's cache directory: ``path``, else ``$ILARGI_CACHE_DIR``, else the platform's cache.

    >>> cache_dir("/tmp/somewhere").name
    'somewhere'
    """
    if path is not None:
        return Path(path)
    if os.environ.get("ILARGI_CACHE_DIR"):
        return Path(os.environ["ILARGI_CACHE_DIR"])
    if os.name == "nt":  # pragma: no cover - not tested on Windows
        return Path(os.environ.get("LOCALAPPDATA", Path.home())) / "ilargi_db" / "cache"
    if platform.system() == "Darwin":  # pragma: no cover
        return Path.home() / "Library" / "Caches" / "ilargi_db"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ilargi_db"


__all__ = ["cache_dir"]
