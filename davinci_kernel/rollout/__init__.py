"""One task group: selection schemes × rollouts × turns, feedback, summary, verification.

``run_group`` drives one task; ``collect_groups`` / ``validate_tasks`` serve the trainer;
``suite.run_suite`` (``dvk run``) and
``optimize.optimize`` (``dvk optimize``) drive it over a suite or one user module and
write the run directory (``davinci_kernel.rundir``).
"""

from .context import Context, GroupStats
from .group import GroupPlan, run_group
from .training import collect_groups, validate_tasks

__all__ = ["Context", "GroupPlan", "GroupStats", "collect_groups", "run_group", "validate_tasks"]
