"""Reports: Fast_p metrics (fastp.py), and `dvk report`'s HTML page and PNG figures for a run.

``build_report(run_dir)`` is imported lazily so that reading Fast_p numbers does not load
Matplotlib.
"""


def __getattr__(name):
    if name == "build_report":
        from .build import build_report

        return build_report
    raise AttributeError(name)
