"""Evaluation and plotting helpers for the memory networks of lesson 04 (multi-hop attention).

The model itself (``MemN2N``) and its hop (``MemoryHop``, a graded exercise) live in the lesson's
notebook. A model here is anything called as ``model(story, story_mask, question)`` that returns
``(logits (B, n_answers), weights (B, K, N))``, ``weights[:, k]`` being hop k's attention over the
N sentence slots (see :mod:`course.data.stories` for the batch layout).
"""

from __future__ import annotations

import torch

from course import plots
from course.data import stories as S

__all__ = ["predict", "accuracy_by_type", "chain_attention", "first_index", "show_hops", "annotate"]


@torch.no_grad()
def predict(model, batch: S.StoryBatch, chunk: int = 1024):
    """Predicted answer classes (B,) and per-hop attention weights (B, K, N), in eval mode."""
    was_training = model.training
    model.eval()
    preds, weights = [], []
    for start in range(0, len(batch), chunk):
        part = batch[start:start + chunk]
        logits, w = model(part.story, part.story_mask, part.question)
        preds.append(logits.argmax(dim=-1))
        weights.append(w)
    model.train(was_training)
    return torch.cat(preds), torch.cat(weights)


def accuracy_by_type(model, batch: S.StoryBatch) -> dict[str, float]:
    """Test accuracy for each question type in :data:`stories.QTYPES` (NaN for an absent type)."""
    pred, _ = predict(model, batch)
    correct = (pred == batch.answer).float()
    out = {}
    for i, qtype in enumerate(S.QTYPES):
        sel = batch.qtype == i
        out[qtype] = correct[sel].mean().item() if bool(sel.any()) else float("nan")
    return out


def chain_attention(model, batch: S.StoryBatch, qtype: str = "chained") -> torch.Tensor:
    """Mean attention of each hop on each supporting fact, over the stories of one question type.

    Returns:
        Tensor (K, F): entry [k, f] is hop k's weight on the f-th supporting fact of the chain
        (for ``chained``: the question's person's animal, the witness's animal, the witness's
        colour), averaged over the stories of type ``qtype`` in ``batch``.
    """
    sel = batch.qtype == S.QTYPES.index(qtype)
    part = batch[sel]
    _, w = predict(model, part)                                           # (B, K, N)
    n_facts = S.N_FACTS[qtype]
    idx = part.supporting[:, :n_facts].to(w.device)                      # (B, F)
    idx = idx.unsqueeze(1).expand(-1, w.shape[1], -1)                     # (B, K, F)
    return torch.gather(w, 2, idx).mean(dim=0).cpu()                      # (K, F)


def first_index(batch: S.StoryBatch, qtype: str, which: int = 0) -> int:
    """Index in ``batch`` of the ``which``-th story whose question has type ``qtype``."""
    hits = (batch.qtype == S.QTYPES.index(qtype)).nonzero().flatten().tolist()
    if not hits:
        raise ValueError(f"no story of type {qtype!r} in this batch")
    return hits[which % len(hits)]


def show_hops(model, batch: S.StoryBatch, story: S.Story, index: int, ax=None):
    """Heatmap of each hop's attention (rows) over the sentences (columns) of one story.

    ``story`` is the :class:`stories.Story` encoded at ``batch[index]``; its supporting facts are
    marked ``*1``, ``*2``… in chain order. The title gives the question, the model's answer and the
    true one. Returns the axes.
    """
    pred, w = predict(model, batch[index:index + 1])
    n = len(story.sentences)
    marks = {s: f" *{i + 1}" for i, s in enumerate(story.supporting)}
    cols = [" ".join(s) + marks.get(i, "") for i, s in enumerate(story.sentences)]
    K = w.shape[1]
    answer = S.ANSWERS[int(pred[0])]
    verdict = "right" if answer == story.answer else "wrong"
    title = f"{' '.join(story.question)}?  model ({K} hops): {answer} ({verdict}); truth: {story.answer}"
    ax = plots.heatmap(w[0, :, :n], rows=[f"hop {k + 1}" for k in range(K)], cols=cols, ax=ax, xlabel="sentence",
                       ylabel="hop", vmax=1.0, annotate=False, title=title, cmap="Purples")
    annotate(ax, w[0, :, :n])
    return ax


def annotate(ax, values, vmax: float = 1.0, fmt: str = "{:.2f}"):
    """Write each value of a heatmap drawn with a colormap that is light at 0 and dark at ``vmax`` (``Purples``,
    ``YlGn``): black on the light cells, white on the dark ones, so every number stays readable."""
    v = values.detach().float().cpu() if isinstance(values, torch.Tensor) else torch.as_tensor(values, dtype=torch.float)
    for i in range(v.shape[0]):
        for j in range(v.shape[1]):
            ax.text(j, i, fmt.format(float(v[i, j])), ha="center", va="center", fontsize=7,
                    color="white" if float(v[i, j]) > 0.55 * vmax else "black")
    return ax
