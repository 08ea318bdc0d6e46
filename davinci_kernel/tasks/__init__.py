"""① Tasks: KernelBench-format problems from the built-in suite, a directory or the HF dataset."""

from .loader import (
                     BUILTIN_DIR,
                     REFERENCE_DIR,
                     SuiteError,
                     candidate_path,
                     check_problem_source,
                     load_dir,
                     load_hf,
                     load_suite,
                     load_task_file,
                     reference_dir,
                     suite_id,
)
from .names import load_task, task_spec

__all__ = ["BUILTIN_DIR", "REFERENCE_DIR", "SuiteError", "candidate_path", "check_problem_source",
           "load_dir", "load_hf", "load_suite", "load_task_file", "reference_dir",
           "suite_id", "load_task", "task_spec"]
