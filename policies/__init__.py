"""Policies: the VLA policy interface and built-in policies (``worldsim.policies``)."""
