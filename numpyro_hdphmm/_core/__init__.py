"""Shared numerics: HMM message passing, validation, special functions.

Everything in here is pure JAX, jittable and vmappable, and used by every kernel.
"""
