"""The three roles one backbone plays: skill selection, policy, skill summary.

Each role has prompt templates (markdown under ``prompts/``) and a parser that survives
real model output and says what was wrong, so the next turn can tell the model.
"""

from .policy import ParsedCode, extract_code, feedback_message, first_messages
from .selection import parse_selection, selection_messages
from .summary import ParsedSummary, parse_summary, summary_messages

__all__ = ["ParsedCode", "ParsedSummary", "extract_code", "feedback_message", "first_messages",
           "parse_selection", "parse_summary", "selection_messages", "summary_messages"]
