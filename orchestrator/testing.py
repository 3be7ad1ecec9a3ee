"""Test models for users' own test suites: scripted answers instead of a provider.

``ScriptedModel`` answers from a list of steps (or one list per agent name), ``FunctionModel``
from a function of the request; ``text``, ``tool_call`` and ``response`` build the steps. The
same names are in :mod:`orchestrator.models`; this module is where test helpers will grow. The
library never imports it.
"""

from __future__ import annotations

from .models.scripted import FunctionModel as FunctionModel
from .models.scripted import ScriptedModel as ScriptedModel
from .models.scripted import Step as Step
from .models.scripted import response as response
from .models.scripted import text as text
from .models.scripted import tool_call as tool_call

__all__ = ["FunctionModel", "ScriptedModel", "Step", "response", "text", "tool_call"]
