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

__all__ = ["BUILTIN_DIR", "REFERENCE_DIR", "SuiteError", "candidate_path", "check_problem_source",
           "load_dir", "load_hf", "load_suite", "load_task_file", "reference_dir",
           "suite_id"]
