"""davinci-kernel: skill-augmented RL for GPU kernel generation (daVinci-kernel method).

Stages: tasks → skills (select) → agents/rollout (generate) → evaluate → rl (reward,
advantage, update) → skills (summarize, verify, admit) → report.
"""

__version__ = "0.1.0"
