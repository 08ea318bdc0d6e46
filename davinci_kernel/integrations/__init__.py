"""The harness as a reward for other trainers (TRL, verl).

Covers: ``kernel_reward.KernelReward`` (completion + task → one of our policy rewards,
judged by the sandboxed evaluator), ``trl.kernel_reward_func`` (a ``reward_funcs=`` entry of
TRL's ``GRPOTrainer``) and ``verl.compute_score`` (verl's custom reward function). Neither
trainer is imported here: both adapters follow their documented calling conventions.

Does not cover: training (``rl/``), or rewards for the selection and summary agents, which
need our own rollout.
"""
