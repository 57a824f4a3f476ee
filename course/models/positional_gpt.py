"""Lesson 09's GPT with its position scheme swapped, for lesson 13's length experiment (never a graded answer).

The model is lesson 09's layout (GPT-2's, as nanoGPT writes it): token embedding, pre-norm blocks
``x + attn(ln1(x))`` and ``x + mlp(ln2(x))`` with a fused ``qkv`` projection and an exact-GELU MLP of
width 4D, a final LayerNorm and an output head tied to the token embedding. Only the way positions enter
changes, one scheme per model:

``"learned"``     a trained table ``pos_emb`` (``nn.Embedding(block_size, D)``) added to the token embeddings:
                  it has no row past ``block_size``, so the model cannot read a longer sequence;
``"sinusoidal"``  a fixed table ``table(n_positions, D)`` added to the token embeddings (lesson 07);
``"rope"``        ``rotate(x, positions, base=...)`` applied to q and k in every layer (lesson 13's ``apply_rope``);
``"alibi"``       ``bias(H, T_q, T_k)`` added to the scores in every layer (lesson 13's ``alibi_bias``, -inf on
                  future keys);
``"none"``        nothing but the causal mask (NoPE).

The functions that compute a scheme (the sinusoid table, the rotation, the bias) are passed in by the
notebook, which wrote them: this module holds none of the lesson's answers. ``forward(idx, positions=None)``
takes the positions of the tokens (default ``0..T-1``), so that an experiment can run the same trained
model with rescaled positions (position interpolation), and ``rope_base`` can be changed after training
(NTK-aware scaling of the base).

Shapes: ``idx (B, T) -> logits (B, T, V)``.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["SCHEMES", "PositionalGPT", "train", "loss_per_position"]

SCHEMES = ("learned", "sinusoidal", "rope", "alibi", "none")


class _Attention(nn.Module):
    """Causal multi-head self-attention; the scheme decides whether q and k are rotated or the scores biased."""

    def __init__(self, d_model: int, n_heads: int, owner: "PositionalGPT"):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self._owner = [owner]               # a list: not registered as a sub-module (no cycle in modules())

    def forward(self, x, positions):
        B, T, D = x.shape
        H = self.n_heads
        owner = self._owner[0]
        q, k, v = self.qkv(x).split(D, dim=-1)                                      # 3 x (B, T, D)
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))     # (B, T, D) -> (B, H, T, Dh)
        if owner.scheme == "rope":
            q = owner.rotate(q, positions, base=owner.rope_base)                   # (B, H, T, Dh), v untouched
            k = owner.rotate(k, positions, base=owner.rope_base)
        if owner.scheme == "alibi":
            bias = owner.bias(H, T, T).to(device=x.device, dtype=q.dtype)         # (H, T, T), -inf on future keys
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)          # (B, H, T, Dh)
        return self.proj(out.transpose(1, 2).reshape(B, T, D))                      # (B, H, T, Dh) -> (B, T, D)


class _Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, owner: "PositionalGPT"):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = _Attention(d_model, n_heads, owner)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x, positions):
        x = x + self.attn(self.ln1(x), positions)
        return x + self.mlp(self.ln2(x))


class PositionalGPT(nn.Module):
    """A GPT (lesson 09's layout) whose positions come from ``scheme``.

    Args:
        vocab_size: V.
        scheme: one of :data:`SCHEMES`.
        block_size: the training length; the number of rows of the learned table (``"learned"`` only).
        d_model, n_heads, n_layers: D, H and the number of blocks.
        table: ``table(n_positions, d_model) -> (n_positions, D)`` for ``"sinusoidal"``.
        rotate: ``rotate(x (B, H, T, Dh), positions (T,), base=...) -> x rotated`` for ``"rope"``.
        bias: ``bias(n_heads, T_q, T_k) -> (H, T_q, T_k)`` for ``"alibi"``.
        rope_base: the base of the rotation's frequencies (may be changed after training).
    """

    def __init__(self, vocab_size: int, scheme: str, *, block_size: int, d_model: int = 64, n_heads: int = 4,
                 n_layers: int = 2, table: Callable | None = None, rotate: Callable | None = None,
                 bias: Callable | None = None, rope_base: float = 10000.0):
        super().__init__()
        if scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}, not {scheme!r}")
        needs = {"sinusoidal": ("table", table), "rope": ("rotate", rotate), "alibi": ("bias", bias)}
        if scheme in needs and needs[scheme][1] is None:
            raise ValueError(f"scheme {scheme!r} needs the function `{needs[scheme][0]}`")
        self.scheme, self.block_size, self.d_model = scheme, block_size, d_model
        self.table, self.rotate, self.bias, self.rope_base = table, rotate, bias, rope_base
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        if scheme == "learned":
            self.pos_emb = nn.Embedding(block_size, d_model)
        self.blocks = nn.ModuleList(_Block(d_model, n_heads, self) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight                      # tied, as GPT-2
        for m in self.modules():                                    # GPT-2's initialisation
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        for name, p in self.named_parameters():                     # residual projections scaled down with depth
            if name.endswith(("attn.proj.weight", "mlp.2.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * n_layers))

    def forward(self, idx, positions=None):
        """Logits (B, T, V) for token ids ``idx`` (B, T) at ``positions`` (T,), default ``0..T-1``."""
        B, T = idx.shape
        if positions is None:
            positions = torch.arange(T, device=idx.device)
        x = self.tok_emb(idx)                                       # (B, T, D)
        if self.scheme == "learned":
            if T > self.block_size:
                raise IndexError(f"the learned position table has {self.block_size} rows (positions 0.."
                                 f"{self.block_size - 1}); a sequence of {T} tokens needs position {T - 1}")
            x = x + self.pos_emb(positions)
        elif self.scheme == "sinusoidal":
            n = int(torch.as_tensor(positions).max().item()) + 1
            x = x + self.table(n, self.d_model).to(x)[positions]   # (T, D), rows at the given positions
        for block in self.blocks:
            x = block(x, positions)
        return self.head(self.ln_f(x))                              # (B, T, V)


def train(model: nn.Module, corpus, *, steps: int, batch_size: int, block_size: int, lr: float, warmup: int,
          generator: torch.Generator, device=None, amp: bool = False, desc: str = "training") -> list[float]:
    """Lesson 09's recipe: AdamW, a linear warm-up, a cosine decay to lr / 10, gradient clipping at 1.

    Each step draws ``batch_size`` random training windows of ``block_size`` tokens from ``corpus``
    (:class:`~course.data.corpus.CharCorpus`) with ``generator``: two models trained with generators seeded
    alike see the same windows in the same order. ``amp``: bf16 autocast on a GPU that supports it.
    Returns the training loss of every step.
    """
    from course.train import autocast, progress

    device = device or next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(       # linear warm-up, then cosine decay to lr / 10
        opt, lambda s: min(1.0, (s + 1) / max(1, warmup)) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(s, steps) / steps))))
    model.train()
    losses = []
    for _ in progress(range(steps), desc=desc):
        x, y = corpus.batch("train", batch_size, block_size, generator, device=device)
        with autocast(device, enabled=amp):
            logits = model(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.detach())
    model.eval()
    return [float(v) for v in torch.stack(losses).cpu()] if losses else []


@torch.no_grad()
def loss_per_position(model: nn.Module, windows: torch.Tensor, *, batch_size: int = 16, **kwargs) -> torch.Tensor:
    """The mean next-token cross-entropy at every position of ``windows`` (N, T + 1): (T,), in nats.

    Position t scores the prediction of ``windows[:, t + 1]`` from ``windows[:, :t + 1]``; ``kwargs`` go to
    the model's forward (``positions=...``).
    """
    model.eval()
    total = None
    for start in range(0, len(windows), batch_size):
        chunk = windows[start:start + batch_size]
        x, y = chunk[:, :-1], chunk[:, 1:]
        logits = model(x, **kwargs)
        nll = F.cross_entropy(logits.float().transpose(1, 2), y, reduction="none").sum(0)   # (T,)
        total = nll if total is None else total + nll
    return (total / len(windows)).cpu()
