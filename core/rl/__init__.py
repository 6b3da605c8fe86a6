"""Learned placement: a PPO policy trained in the simulator (issue 6).

``features`` (candidates and state), ``env`` (a Gymnasium environment over the
FGD protocol), ``network`` (the permutation-equivariant candidate scorer),
``ppo`` (GAE and the clipped update), ``rollout`` (Ray workers), ``training``
(the loop), ``persistence`` (safetensors + schema), ``policy`` (the scheduler
policy with its FGD fallback).
"""
