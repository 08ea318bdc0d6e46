"""The candidate worker process: one candidate, inside the OS sandbox, then discarded (``worker.py``)."""
