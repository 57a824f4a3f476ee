"""Seeded, offline data generators: every lesson's data is made here, never downloaded.

Every generator takes a ``seed`` (or a ``torch.Generator``) and returns the same data for the
same seed on every machine.
"""
