"""Policies: the VLA policy interface and built-in policies (``worldsim.policies``)."""

from worldsim.policies.adapters import (
    ExternalVLAAdapter,
    ExternalVLAConfig,
    TransformersVLAAdapter,
    TransformersVLAConfig,
)
from worldsim.policies.base import POLICY_TYPES, Batch, Policy, PolicyOutput, load_policy, register_policy
from worldsim.policies.expert import ScriptedExpert, ScriptedExpertConfig
from worldsim.policies.language import InstructionEncoder, embed_instructions
from worldsim.policies.lerobot import LeRobotPolicy
from worldsim.policies.mlp import MLPPolicy, MLPPolicyConfig
from worldsim.policies.tinyvla import TinyVLA, TinyVLAConfig

__all__ = [
    "POLICY_TYPES",
    "Batch",
    "ExternalVLAAdapter",
    "ExternalVLAConfig",
    "InstructionEncoder",
    "LeRobotPolicy",
    "MLPPolicy",
    "MLPPolicyConfig",
    "Policy",
    "PolicyOutput",
    "ScriptedExpert",
    "ScriptedExpertConfig",
    "TinyVLA",
    "TinyVLAConfig",
    "TransformersVLAAdapter",
    "TransformersVLAConfig",
    "embed_instructions",
    "load_policy",
    "register_policy",
]
