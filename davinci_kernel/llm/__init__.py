"""The backbone: one interface (batched async ``generate``) over several model backends.

``make_backend("openai:URL#MODEL" | "hf:PATH" | "script:FILE.py")`` picks one; every
backend returns ``records.Completion`` objects, with token ids and log-probs when the
backend can give them.
"""

from .base import Backend, GenRequest
from .spec import make_backend

__all__ = ["Backend", "GenRequest", "make_backend"]
