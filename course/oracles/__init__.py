"""Bridges between the learners' modules and PyTorch's own, used as test oracles.

``attention``: copy weights into ``nn.MultiheadAttention`` and convert masks (lesson 06).
``transformer``: the same for ``nn.TransformerEncoderLayer`` and friends (lesson 07 onwards).
"""
