"""The OS sandbox, set up from the harness: ``sandbox`` (what the host offers, each worker's
folders, uid and environment), ``sandbox_cgroup`` (its cgroup), ``procs`` (a worker process
and its channel), ``forkserver`` (the harness's side of the zygote that forks workers).
What runs inside the new namespaces is ``shared/sandbox_enter.py`` and
``shared/worker_world.py``; the zygote itself is ``candidate/zygote.py``.
"""
