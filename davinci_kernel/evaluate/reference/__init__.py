"""The reference process: the problem's own Model only, never a candidate (``process.py``)."""
