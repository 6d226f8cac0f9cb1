"""Policies: the VLA policy interface and built-in policies (``worldsim.policies``)."""

from worldsim.policies.base import POLICY_TYPES, Batch, Policy, PolicyOutput, load_policy, register_policy
from worldsim.policies.expert import ScriptedExpert, ScriptedExpertConfig

__all__ = ["POLICY_TYPES", "Batch", "Policy", "PolicyOutput", "ScriptedExpert", "ScriptedExpertConfig",
           "load_policy", "register_policy"]
