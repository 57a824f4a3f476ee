"""Tools around lesson 08's encoder-decoder Transformer, for its experiments (never a graded answer).

The learner writes the model, the decoders and checkpoint averaging; this module holds what the
lesson's experiments do *with* them:

``CrossAttentionRecorder``  a context manager that records the per-head cross-attention weights of every
                            ``cross_attn`` module (an ``nn.MultiheadAttention``) of a model while it runs;
``translate_with``          translate a list of :class:`~course.data.translation.Pair` in batches with any
                            decoding function that follows ``greedy_decode``'s signature;
``score_by_length``         exact match, token accuracy and BLEU, overall and by source length;
``GRUCrossAttention``       a cross-attention module for :class:`course.models.seq2seq.Seq2Seq` built on
                            ``nn.MultiheadAttention`` (one head, a learned query projection), so the lesson
                            can train lesson 02's GRU translator without lesson 02's graded answers.
"""

from __future__ import annotations

import torch
from torch import nn

from course.models.seq2seq import score_by_length  # noqa: F401 - re-exported for lesson 08

__all__ = ["CrossAttentionRecorder", "translate_with", "score_by_length", "GRUCrossAttention"]


class CrossAttentionRecorder:
    """Record the cross-attention weights of a model's decoder layers.

    Every sub-module named ``cross_attn`` (an ``nn.MultiheadAttention``) is asked for its per-head weights
    while the block is active; after each forward call, ``weights[i]`` holds layer ``i``'s last weights,
    ``(B, H, T, S)``. Usage::

        with CrossAttentionRecorder(model) as rec:
            model(src, tgt, src_mask)
        rec.weights[0]          # (B, H, T, S), layer 0
    """

    def __init__(self, model: nn.Module):
        self.modules = [m for name, m in model.named_modules()
                        if name.split(".")[-1] == "cross_attn" and isinstance(m, nn.MultiheadAttention)]
        if not self.modules:
            raise ValueError("the model has no nn.MultiheadAttention called cross_attn to record.")
        self.weights: list[torch.Tensor | None] = [None] * len(self.modules)
        self._handles = []

    def __enter__(self):
        for i, m in enumerate(self.modules):
            def pre(module, args, kwargs):
                kwargs = dict(kwargs, need_weights=True, average_attn_weights=False)
                return args, kwargs

            def post(module, args, kwargs, output, i=i):
                self.weights[i] = output[1].detach()

            self._handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
            self._handles.append(m.register_forward_hook(post, with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []
        return False


@torch.no_grad()
def translate_with(decode, model, data, pairs, *, batch_size: int = 256, extra: int = 5, bos_id: int = 1,
                   eos_id: int = 2, device=None) -> list[list[str]]:
    """Translate ``pairs`` with ``decode(model, src, max_len, bos_id, eos_id) -> (B, L) tokens``, in batches.

    Sentences are decoded in length-sorted batches (little padding); ``max_len`` is the longest reference
    in the batch plus ``extra``. Returns the target words of each pair, in the order given.
    """
    model.eval()
    device = device or next(model.parameters()).device
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i].src))
    out: list[list[str] | None] = [None] * len(pairs)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        batch = data.batch([pairs[i] for i in idx], device=device)
        limit = max(len(pairs[i].tgt) for i in idx) + extra
        tokens = decode(model, batch.src, limit, bos_id, eos_id)
        for row, i in zip(tokens.tolist(), idx):
            out[i] = data.tgt_vocab.decode(row)
    return out




class GRUCrossAttention(nn.Module):
    """Cross-attention for :class:`~course.models.seq2seq.Seq2Seq`'s Luong decoder, from PyTorch's module.

    The decoder state (size ``d_query``) is projected to the encoder states' size ``d_key`` and used as
    the single query of a one-head ``nn.MultiheadAttention`` over the encoder states.

    Shapes:
        ``forward(query (B, Dq), keys (B, S, Dk), values (B, S, Dk), mask (B, S) True on real tokens)
        -> (context (B, Dk), weights (B, S))``.
    """

    def __init__(self, d_query: int, d_key: int):
        super().__init__()
        self.query = nn.Linear(d_query, d_key)
        self.attn = nn.MultiheadAttention(d_key, 1, batch_first=True)

    def forward(self, query, keys, values, mask):
        q = self.query(query).unsqueeze(1)                                       # (B, 1, Dk)
        context, weights = self.attn(q, keys, values, key_padding_mask=~mask)  # PyTorch: True on padding
        return context[:, 0], weights[:, 0]                                      # (B, Dk), (B, S)
