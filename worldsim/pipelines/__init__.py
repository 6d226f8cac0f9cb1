"""Pipelines that chain the stages: the quickstart and world model-policy co-evolution."""
