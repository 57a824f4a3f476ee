"""Oracles for lesson 08's hidden tests (the Transformer, decoding, checkpoint averaging).

Instructor side: never shipped to learners (these compute the exercises' answers). Every search
here reads the probabilities of :class:`course.checks_08.TableModel` directly, in plain Python, so it
is independent of how a learner writes their decoder.
"""

from __future__ import annotations

import math

import torch

from course import checks, checks_08
from course.oracles.transformer import to_torch_decoder_layer, to_torch_transformer

__all__ = ["table_logprobs", "greedy", "exhaustive", "beam", "sinusoidal", "compare_model_with_torch",
           "torch_decoder_output", "mean_state_dict", "translation_loss"]


def table_logprobs(model: checks_08.TableModel, src: torch.Tensor):
    """``f(prefix) -> list of V log-probs`` for one source sentence (prefix without <bos>)."""
    src = src.reshape(1, -1)
    mask = src != model.pad_id
    memory = model.encode(src, mask)
    cache = {}

    def f(prefix):
        key = tuple(prefix)
        if key not in cache:
            tgt = torch.tensor([[checks_08.BOS] + list(prefix)])
            with torch.no_grad():
                cache[key] = model.decode(tgt, memory, mask)[0, -1].double().tolist()
        return cache[key]

    return f


def greedy(model, src, max_len, eos_id=checks_08.EOS):
    """The greedy tokens for one sentence (without <bos>, ending with <eos> if produced)."""
    f, out = table_logprobs(model, src), []
    while len(out) < max_len:
        lp = f(out)
        out.append(max(range(len(lp)), key=lambda v: lp[v]))
        if out[-1] == eos_id:
            break
    return out


def exhaustive(model, src, max_len, alpha, eos_id=checks_08.EOS):
    """Every complete hypothesis (ends with <eos>, or has max_len tokens), scored log P / lp, best first."""
    f = table_logprobs(model, src)
    done = []

    def walk(prefix, logp):
        lp = f(prefix)
        for v, l in enumerate(lp):
            y, s = prefix + [v], logp + l
            if v == eos_id or len(y) == max_len:
                done.append((y, s / checks_08.gnmt_penalty(len(y), alpha)))
            else:
                walk(y, s)

    walk([], 0.0)
    return sorted(done, key=lambda h: -h[1])


def beam(model, src, beam_size, max_len, alpha, eos_id=checks_08.EOS):
    """The lesson's beam search, written as a plain loop over Python lists."""
    f = table_logprobs(model, src)
    live, finished = [([], 0.0)], []
    for step in range(1, max_len + 1):
        cands = [(y + [v], s + l) for y, s in live for v, l in enumerate(f(y))]
        cands.sort(key=lambda c: -c[1])
        live = []
        for y, s in cands[: beam_size - len(finished)]:
            if y[-1] == eos_id or step == max_len:
                finished.append((y, s / checks_08.gnmt_penalty(len(y), alpha)))
            else:
                live.append((y, s))
        if not live or len(finished) >= beam_size:
            break
    return sorted(finished, key=lambda h: -h[1])[:beam_size]


def sinusoidal(P, D):
    """PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i), w_i = 10000^(-2i/D), in float64, by loops."""
    out = torch.zeros(P, D, dtype=torch.float64)
    for p in range(P):
        for j in range(0, D, 2):
            out[p, j] = math.sin(p / 10000 ** (j / D))
            if j + 1 < D:
                out[p, j + 1] = math.cos(p / 10000 ** (j / D))
    return out


def torch_decoder_output(block, x, memory, tgt_mask=None, memory_mask=None):
    """``nn.TransformerDecoderLayer`` with a copy of ``block``'s weights, masks in the course's convention."""
    from course.oracles.attention import to_torch_attn_mask

    layer = to_torch_decoder_layer(block).eval()
    B, T, S, H = x.shape[0], x.shape[1], memory.shape[1], layer.self_attn.num_heads

    def conv(m, tk):
        return None if m is None else to_torch_attn_mask(m, batch_size=B, n_heads=H, tgt_len=T, src_len=tk)

    with torch.no_grad():
        return layer(x, memory, tgt_mask=conv(tgt_mask, T), memory_mask=conv(memory_mask, S))


def compare_model_with_torch(cls, model, src, tgt, src_mask, what):
    """The learner's ``model(src, tgt, src_mask)`` (PyTorch's ready-made decoder forbidden) equals ``nn.Transformer``
    with its weights, and its position table equals the formula (atol 1e-5)."""
    checks.check(hasattr(model, "pe"), f"{what}: your Transformer needs its position table as a buffer `pe`.")
    pe = model.pe
    checks.check_close(pe, sinusoidal(pe.shape[0], pe.shape[1]), f"{what}: the position table pe", atol=1e-5,
                       hint="pe[p, 2i] = sin(p / 10000^(2i/D)), pe[p, 2i+1] = cos(p / 10000^(2i/D)).")
    checks.randomise_weights(model, torch.Generator().manual_seed(808), "your Transformer")    # weights the test chose
    want = to_torch_transformer(model)(src, tgt, src_mask).detach()
    got = checks_08.call_model(cls, model, src, tgt, src_mask)
    checks.check_close(got, want, what, atol=1e-5,
                       hint="embeddings times sqrt(d_model) plus pe, the encoder stack (source padding as key padding), "
                            "the decoder stack (causal self-attention, source padding in the cross-attention), the "
                            "final norms only with norm_first, then generator.")


def mean_state_dict(state_dicts):
    """Element-wise mean of the floating tensors (float64 arithmetic), the last checkpoint's other tensors."""
    out = {}
    for k, last in state_dicts[-1].items():
        if last.is_floating_point():
            out[k] = (sum(sd[k].double() for sd in state_dicts) / len(state_dicts)).to(last.dtype)
        else:
            out[k] = last.clone()
    return out


def translation_loss(model, src, tgt, pad_id=0):
    """Mean of -log P(tgt[t+1] | tgt[:t+1], src) over the real target tokens, by an explicit loop (float64)."""
    mask = src != pad_id
    with torch.no_grad():
        logp = torch.log_softmax(model(src, tgt[:, :-1], mask).double(), dim=-1)     # (B, T, V)
    total, n = 0.0, 0
    for b in range(tgt.shape[0]):
        for t in range(tgt.shape[1] - 1):
            y = int(tgt[b, t + 1])
            if y != pad_id:
                total -= float(logp[b, t, y])
                n += 1
    return torch.tensor(total / n)
