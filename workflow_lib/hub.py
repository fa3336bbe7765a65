"""Failing fast when the Hugging Face hub cannot be reached.

Without network the hub clients retry with backoff for half a minute before they give up, and the error
they raise names neither our config key nor a way out. One TCP connect with a short timeout tells the same
at once, so the data, tokenizer and model stages check first and say how to use local files instead.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse


def hub_unreachable(name: str, timeout: float = 3.0) -> str | None:
    """Why `name` cannot be fetched from the hub, or None (a local folder, offline mode, or reachable).

    In offline mode (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) the libraries read their cache without trying
    the network, so no check is needed.
    """
    if Path(name).exists() or "1" in (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("HF_DATASETS_OFFLINE")):
        return None
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
    except OSError as error:
        return f"cannot reach {constants.ENDPOINT} ({error})"
    return None
