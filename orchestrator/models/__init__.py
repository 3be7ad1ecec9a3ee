"""Models: the :class:`Model` protocol, the test models, and the provider adapters.

``AnthropicModel`` is imported lazily so that ``import orchestrator`` does not import the SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from .base import AgentInfo, ClientPool, Model, ModelContext, ModelRequest, ModelResponse, ToolSpec
from .scripted import FunctionModel, ScriptedModel, Step, response, text, tool_call

if TYPE_CHECKING:
    from .anthropic import AnthropicModel
    from .offline import OfflineModel

__all__ = [
    "AgentInfo",
    "AnthropicModel",
    "ClientPool",
    "FunctionModel",
    "Model",
    "ModelContext",
    "ModelRequest",
    "ModelResponse",
    "OfflineModel",
    "ScriptedModel",
    "Step",
    "ToolSpec",
    "resolve_model",
    "response",
    "text",
    "tool_call",
]


def __getattr__(name: str) -> Any:
    if name == "AnthropicModel":
        from .anthropic import AnthropicModel

        return AnthropicModel
    if name == "OfflineModel":
        from .offline import OfflineModel

        return OfflineModel
    raise AttributeError(name)


def resolve_model(spec: Model | str) -> Model:
    """A model from a :class:`Model` or a string: ``"anthropic:<name>"`` or ``"offline"``."""
    if not isinstance(spec, str):
        if not isinstance(spec, Model):
            raise ConfigurationError(f"not a model: {spec!r} (use a Model or 'anthropic:<name>')")
        return spec
    provider, _, name = spec.partition(":")
    if provider == "anthropic" and name.strip():
        from .anthropic import AnthropicModel

        anthropic_model: Model = AnthropicModel(name)
        return anthropic_model
    if spec == "offline":
        from .offline import OfflineModel

        offline_model: Model = OfflineModel()
        return offline_model
    raise ConfigurationError(
        f"unknown model {spec!r}: use 'anthropic:<model-name>', 'offline', or a Model object"
    )
