"""Learned video world models, wrapped as imagined Gymnasium environments (``worldsim.world_models``)."""
