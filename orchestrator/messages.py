"""Compatibility path: the same names as :mod:`orchestrator.core.messages`, where they now live."""

from __future__ import annotations

from .core.messages import Block as Block
from .core.messages import Message as Message
from .core.messages import RedactedThinkingBlock as RedactedThinkingBlock
from .core.messages import Role as Role
from .core.messages import TextBlock as TextBlock
from .core.messages import ThinkingBlock as ThinkingBlock
from .core.messages import ToolResultBlock as ToolResultBlock
from .core.messages import ToolUseBlock as ToolUseBlock
from .core.messages import Usage as Usage
from .core.messages import block_from_wire as block_from_wire
from .core.messages import is_blank as is_blank
from .core.messages import is_text as is_text
from .core.messages import message_from_wire as message_from_wire
from .core.messages import text_of as text_of
from .core.messages import to_wire as to_wire
from .core.messages import well_formed as well_formed

__all__ = [
    "Block",
    "Message",
    "RedactedThinkingBlock",
    "Role",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "Usage",
    "block_from_wire",
    "is_blank",
    "is_text",
    "message_from_wire",
    "text_of",
    "to_wire",
    "well_formed",
]
