"""Tools the agent can call: the registry (schemas, validation, timeouts, size caps) and built-in tools."""

from agent.tools.memory_tool import memory_tool
from agent.tools.registry import Tool, ToolOutcome, ToolRegistry, cap_text
from agent.tools.schema import validate

__all__ = ["Tool", "ToolOutcome", "ToolRegistry", "cap_text", "memory_tool", "validate"]
