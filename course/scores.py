"""Helpers for lesson 03 (attention scores): a key-matching task and attention statistics.

Nothing here is a graded answer: the score functions and ``masked_softmax`` are the learner's.
This module holds what the lesson's experiments measure with them:

``key_matching_batch``  a seeded retrieval task: find the stored key that a noisy query was made
                        from and return its value (the label). Learning it means learning the
                        projections W_q, W_k whose scores single out the right key.
``attention_entropy``   the entropy of attention weights, row by row (0 = one-hot, log T_k = uniform),
                        safe on the exact zeros that masked positions get.
``softmax_jacobian_norm`` how much the softmax still passes gradients at given scores.
"""

from __future__ import annotations

import torch

__all__ = ["key_matching_batch", "attention_entropy", "softmax_jacobian_norm"]


def key_matching_batch(batch_size: int, n_keys: int, d_in: int, n_classes: int, *, noise: float = 0.5,
                       min_keys: int | None = None, generator: torch.Generator | None = None):
    """A batch of the key-matching (soft dictionary retrieval) task.

    Each example stores ``n_keys`` random keys with a random class label each, and asks a query
    that is a noisy copy of one of the stored keys. The answer is the label of that key. Some
    slots may be padding (when ``min_keys`` is given): their mask is False and they must get no
    attention.

    Args:
        batch_size: B.
        n_keys: S, the number of memory slots (the padded length).
        d_in: the size of the raw key and query vectors.
        n_classes: C, the number of labels.
        noise: standard deviation of the noise added to the query (keys are N(0, 1)).
        min_keys: if given, each example has a random number of real keys in [min_keys, S].
        generator: a seeded ``torch.Generator`` for reproducible batches.

    Returns:
        (query, keys, labels, mask, target): ``query`` (B, d_in), ``keys`` (B, S, d_in),
        ``labels`` (B, S) int64 in [0, C), ``mask`` (B, S) bool, True on real keys, ``target``
        (B,) int64, the label of the key the query was made from. ``index`` of that key is not
        returned: the task is judged on the label.
    """
    B, S = batch_size, n_keys
    keys = torch.randn(B, S, d_in, generator=generator)
    labels = torch.randint(0, n_classes, (B, S), generator=generator)
    if min_keys is None:
        lengths = torch.full((B,), S)
    else:
        lengths = torch.randint(min_keys, S + 1, (B,), generator=generator)
    mask = torch.arange(S).unsqueeze(0) < lengths.unsqueeze(1)                      # (B, S)
    # the queried slot is uniform among the real ones
    index = (torch.rand(B, generator=generator) * lengths).long().clamp(max=S - 1)   # (B,)
    rows = torch.arange(B)
    query = keys[rows, index] + noise * torch.randn(B, d_in, generator=generator)   # (B, d_in)
    keys = keys * mask.unsqueeze(-1)                                                 # padding keys are zero
    target = labels[rows, index]                                                     # (B,)
    return query, keys, labels, mask, target


def attention_entropy(weights: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Entropy (in nats) of each distribution along ``dim``; exact zeros contribute nothing.

    0 means all the weight sits on one key; ``log(n)`` means uniform over ``n`` keys.
    """
    return -torch.special.xlogy(weights, weights).sum(dim)


def softmax_jacobian_norm(scores: torch.Tensor) -> torch.Tensor:
    """Frobenius norm of d softmax(s) / d s for each row of ``scores`` (..., T) -> (...).

    The Jacobian is diag(p) - p p^T. It is largest for spread-out weights and tends to 0 as the
    softmax saturates to a one-hot vector: then no gradient reaches the scores, nor q and k.
    Computed in closed form: ||J||_F^2 = sum p_i^2 - 2 sum p_i^3 + (sum p_i^2)^2.
    """
    p = torch.softmax(scores.double(), dim=-1)
    s2 = (p ** 2).sum(-1)
    s3 = (p ** 3).sum(-1)
    return (s2 - 2 * s3 + s2 ** 2).clamp(min=0).sqrt().to(scores.dtype)
