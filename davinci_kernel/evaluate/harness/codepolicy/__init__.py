"""The code policy: what a candidate file may say before anything runs (harness side).

``static`` (AST checks, the entry point), ``policy`` (the allowed subset of Python: imports,
names, attributes), ``policy_tables`` / ``policy_objects`` (what the subset allows and
denies), ``pointer_policy`` (no integer becomes a pointer: pointer types, pointer
signatures, objects posing as tensors, inline assembly), ``native_policy`` (the C++/CUDA of
``load_inline``), ``policy_doc`` (the policy as a docs page). Does not cover: running a candidate (``harness/isolation``, ``candidate/``).
"""
