"""Bridges between the learners' modules and PyTorch's own, used as test oracles.

``attention``: copy weights into ``nn.MultiheadAttention`` and convert masks (lesson 06).
``transformer``: the same for ``nn.TransformerEncoderLayer`` (lesson 07 onwards), and
``with_torch_norms`` to swap a learner's LayerNorms for PyTorch's so that one bug costs points once.
"""
