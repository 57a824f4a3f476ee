"""Bridges between the learners' modules and PyTorch's or `transformers`' own, used as test oracles.

``attention``: copy weights into ``nn.MultiheadAttention`` and convert masks (lesson 06).
``transformer``: the same for ``nn.TransformerEncoderLayer`` (lesson 07 onwards), ``nn.TransformerDecoderLayer``
and ``nn.Transformer`` (lesson 08), and ``with_torch_norms`` to swap a learner's LayerNorms for PyTorch's so
that one bug costs points once.
``gpt2``: lesson 09's GPT into ``transformers.GPT2LMHeadModel``.
``bert``: lesson 10's Bert into ``transformers.BertModel`` / ``BertForPreTraining`` (eager attention).
``vit``: lesson 11's ViT into ``transformers.ViTModel`` / ``ViTForImageClassification``.
``llama``: lesson 13's RotarySelfAttention into ``transformers``' ``LlamaAttention`` (eager, cos/sin from
``LlamaRotaryEmbedding``; transformers 4.40 to 5.x).
"""
