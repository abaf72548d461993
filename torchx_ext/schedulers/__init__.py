"""Scheduler adapters (local_cwd, local_docker, kubernetes) and what they share (placement)."""
