"""A scripted stand-in for a model (`--model script:THIS_FILE`): every reply is the SiLU kernel
of examples/quickstart, so `dvk optimize` runs end to end with no model and no server."""
from pathlib import Path

KERNEL = (Path(__file__).resolve().parents[1] / "quickstart" / "kernels" / "level1" / "1_SiLU.py").read_text()


def respond(request):
    return "Here is a fused kernel:\n```python\n" + KERNEL + "```"
