"""Units of lesson 15's package side: course.serving (the model and the measuring tools) and course.checks_15."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course import checks_15, serving


class FullCache:
    """Keeps everything (lesson 09's cache, with positions)."""

    def __init__(self):
        self.k = self.v = None
        self.n = 0

    def append(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        self.n += k.shape[2]

    def keys(self):
        return self.k

    def values(self):
        return self.v

    def positions(self):
        return torch.arange(self.n)


class WindowCache(FullCache):
    """The first n_sinks and the last window tokens (what the lesson's exercise builds)."""

    def __init__(self, window, n_sinks):
        super().__init__()
        self.window, self.n_sinks, self.pos = window, n_sinks, torch.zeros(0, dtype=torch.long)

    def append(self, k, v):
        super().append(k, v)
        self.pos = torch.cat([self.pos, torch.arange(self.n - k.shape[2], self.n)])
        keep = (self.pos < self.n_sinks) | (self.pos >= self.n - self.window)
        self.k, self.v, self.pos = self.k[:, :, keep], self.v[:, :, keep], self.pos[keep]

    def positions(self):
        return self.pos


def linear(q, k, v, state=None, return_state=False):
    """Causal linear attention (elu + 1 features), parallel form with an optional carried state."""
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    S = fk.unsqueeze(-1) * v.unsqueeze(-2)
    S, z = S.cumsum(-3), fk.cumsum(-2)
    if state is not None:
        S, z = S + state[0].unsqueeze(-3), z + state[1].unsqueeze(-2)
    out = (fq.unsqueeze(-2) @ S).squeeze(-2) / (fq * z).sum(-1, keepdim=True)
    return (out, (S[..., -1, :, :], z[..., -1, :])) if return_state else out


def model(seed=0, **kw):
    torch.manual_seed(seed)
    m = serving.ServingLM(11, d_model=16, n_heads=2, n_layers=2, max_distance=5, **kw).eval()
    with torch.no_grad():                        # a distance bias that matters
        for block in m.blocks:
            if block.attn.mixer is None:
                block.attn.distance_bias.normal_(0, 1.0)
    return m


def test_window_mask():
    got = serving.window_mask(6, window=2, n_sinks=1)
    want = torch.tensor([[1, 0, 0, 0, 0, 0],
                         [1, 1, 0, 0, 0, 0],
                         [1, 1, 1, 0, 0, 0],
                         [1, 0, 1, 1, 0, 0],
                         [1, 0, 0, 1, 1, 0],
                         [1, 0, 0, 0, 1, 1]], dtype=torch.bool)
    assert torch.equal(got, want)
    assert torch.equal(serving.window_mask(4, window=4), torch.ones(4, 4, dtype=torch.bool).tril())


@pytest.mark.parametrize("window,n_sinks", [(None, 0), (3, 0), (3, 2), (1, 1)])
def test_step_through_a_cache_equals_one_masked_pass(window, n_sinks):
    m = model().double()
    idx = torch.randint(0, 11, (2, 17), generator=torch.Generator().manual_seed(1))
    caches = [FullCache() if window is None else WindowCache(window, n_sinks) for _ in range(m.n_layers)]
    with torch.no_grad():
        stepped = torch.cat([m.step(idx[:, t:t + 1], t, caches) for t in range(17)], dim=1)
        direct = m(idx) if window is None else m(idx, window=window, n_sinks=n_sinks)
    assert (stepped - direct).abs().max() < 1e-12
    if window is not None:                       # and the window does change the result
        assert (direct - m(idx)).abs().max() > 1e-3


def test_positions_enter_only_as_distances():
    """The same tokens at positions shifted by 100 give the same logits; renumbered keys do not."""
    m = model().double()
    idx = torch.randint(0, 11, (1, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        caches = [FullCache() for _ in range(2)]
        a = torch.cat([m.step(idx[:, t:t + 1], t, caches) for t in range(9)], dim=1)

        class Shifted(FullCache):
            def positions(self):
                return torch.arange(self.n) + 100

        caches = [Shifted() for _ in range(2)]
        b = torch.cat([m.step(idx[:, t:t + 1], t + 100, caches) for t in range(9)], dim=1)
    assert (a - b).abs().max() < 1e-12
    assert torch.allclose(a, m(idx), atol=1e-12)


def test_linear_mixer_step_recurrent_equals_parallel_and_the_state_is_flat():
    m = model(mixer=lambda q, k, v: linear(q, k, v)).double()
    assert not any("distance_bias" in n for n, _ in m.named_parameters())
    idx = torch.randint(0, 11, (1, 12), generator=torch.Generator().manual_seed(3))
    states, outs, sizes = [None, None], [], []
    with torch.no_grad():
        for t in range(12):
            logits, states = m.step_recurrent(idx[:, t:t + 1], states, linear)
            outs.append(logits)
            sizes.append(serving.kv_bytes([x for s in states for x in s]))
        assert (torch.cat(outs, dim=1) - m(idx)).abs().max() < 1e-10
    assert len(set(sizes)) == 1 and sizes[0] == 2 * (2 * 8 * 8 + 2 * 8) * 8     # 2 blocks x 2 heads, float64


def test_keys_values_are_what_a_full_cache_holds():
    m = model()
    idx = torch.randint(0, 11, (2, 7), generator=torch.Generator().manual_seed(4))
    caches = [FullCache() for _ in range(2)]
    with torch.no_grad():
        for t in range(7):
            m.step(idx[:, t:t + 1], t, caches)
        kv = m.keys_values(idx)
    for (k, v), cache in zip(kv, caches):
        assert k.shape == (2, 2, 7, 8)
        assert torch.allclose(k, cache.keys(), atol=1e-6) and torch.allclose(v, cache.values(), atol=1e-6)


def test_attention_weights_are_returned_and_masked():
    m = model()
    idx = torch.randint(0, 11, (1, 10), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        _, maps = m(idx, window=3, n_sinks=1, return_weights=True)
    for w in maps:
        assert w.shape == (1, 2, 10, 10)
        assert torch.allclose(w.sum(-1), torch.ones(1, 2, 10))
        assert (w * ~serving.window_mask(10, 3, 1)).abs().max() == 0


def test_bigram_draft_from_counts():
    ids = torch.tensor([0, 1, 0, 1, 0, 2, 2, 2])
    d = serving.BigramDraft.from_counts(ids, 3, smoothing=0.0)
    probs = torch.softmax(d(torch.tensor([[0, 1, 2]])), dim=-1)[0]
    assert torch.allclose(probs[0], torch.tensor([0.0, 2 / 3, 1 / 3]), atol=1e-6)
    assert torch.allclose(probs[1], torch.tensor([1.0, 0.0, 0.0]), atol=1e-6)
    assert torch.allclose(probs[2], torch.tensor([0.0, 0.0, 1.0]), atol=1e-6)


def test_call_counter_and_recorder():
    m = checks_15.FixedLM(torch.zeros(4))
    c = serving.CallCounter(m)
    c(torch.zeros(1, 3, dtype=torch.long))
    c(torch.zeros(1, 5, dtype=torch.long))
    assert (c.calls, c.tokens) == (2, 8)
    c.reset()
    assert (c.calls, c.tokens) == (0, 0)
    r = serving.CallRecorder(m)
    x = torch.tensor([[1, 2]])
    r(x)
    x[0, 0] = 3                                  # a copy was kept
    assert r.inputs[0].tolist() == [[1, 2]]


def test_speculation_rounds():
    """Prompt [9]; round 1 proposes 1 2 3, keeps 2, the target writes 7; round 2 proposes 4 5 6, keeps all, the
    target adds 8 (the bonus); the draft's own calls (shorter than the accepted text) are skipped."""
    out = torch.tensor([[9, 1, 2, 7, 4, 5, 6, 8]])
    calls = [torch.tensor([[9]]), torch.tensor([[9, 1, 2, 3]]), torch.tensor([[9, 1, 2, 7, 4, 5, 6]])]
    rounds = serving.speculation_rounds(calls, out, 1)
    assert rounds == [dict(start=1, proposed=[1, 2, 3], kept=2, target_token=7),
                      dict(start=4, proposed=[4, 5, 6], kept=3, target_token=8)]


def test_chi_square():
    probs = torch.tensor([0.5, 0.25, 0.25, 0.0])
    stat, dof, p = serving.chi_square(torch.tensor([500.0, 250, 250, 0]), probs)
    assert stat == 0 and dof == 2 and p == pytest.approx(1.0)
    stat, dof, p = serving.chi_square(torch.tensor([520.0, 230, 250, 0]), probs)
    assert stat == pytest.approx(20 ** 2 / 500 + 20 ** 2 / 250) and p == pytest.approx(math.exp(-stat / 2), rel=1e-6)
    assert serving.chi_square(torch.tensor([400.0, 300, 300, 0]), probs)[2] == pytest.approx(math.exp(-20), rel=1e-6)
    assert serving.chi_square(torch.tensor([500.0, 250, 240, 10]), probs)[2] == 0.0     # a token of probability 0
    # cells expected below 5 are pooled
    stat, dof, p = serving.chi_square(torch.tensor([97.0, 1, 1, 1]), torch.tensor([0.97, 0.01, 0.01, 0.01]))
    assert dof == 1 and stat == pytest.approx(0.0)


def test_chi_square_false_alarms_are_rare():
    """Counts drawn from the probabilities themselves: the p-value is about uniform (about 1 % below 0.01)."""
    g = torch.Generator().manual_seed(0)
    probs = torch.tensor([0.4, 0.3, 0.2, 0.05, 0.05])
    ps = [serving.chi_square(torch.bincount(torch.multinomial(probs, 2000, True, generator=g), minlength=5), probs)[2]
          for _ in range(300)]
    assert 0.02 < sum(p < 0.1 for p in ps) / 300 < 0.2
    assert sum(p < 0.01 for p in ps) <= 9


def test_toy_models_and_frequencies():
    fixed = checks_15.FixedLM(torch.tensor([1.0, 0.0, -1.0]))
    assert fixed(torch.zeros(2, 5, dtype=torch.long)).shape == (2, 5, 3)
    table = torch.arange(9.0).view(3, 3)
    assert torch.equal(checks_15.BigramLM(table)(torch.tensor([[2, 0]])), table[[2, 0]][None])
    tokens = torch.tensor([[0, 1, 1, 2, 1]])
    assert checks_15.frequencies(tokens, 1, 3).tolist() == [[0.0, 0.75, 0.25]]
    freq, rows = checks_15.transitions(tokens, 1, 3)
    assert rows.tolist() == [1, 2, 1] and freq[1].tolist() == [0.0, 0.5, 0.5] and freq[2].tolist() == [0.0, 1.0, 0.0]
    checks_15.check_token_frequencies(torch.tensor([[0.5, 0.5, 0.0]]), torch.tensor([[0.45, 0.55, 0.0]]), "x", atol=0.1)
    with pytest.raises(AssertionError, match="never writes"):
        checks_15.check_token_frequencies(torch.tensor([[0.5, 0.4, 0.1]]), torch.tensor([[0.5, 0.5, 0.0]]), "x", atol=0.2)
    with pytest.raises(AssertionError, match="after token 1, token 0 came 0.700"):
        checks_15.check_token_frequencies(torch.tensor([[0.5, 0.5], [0.7, 0.3]]), torch.tensor([[0.5, 0.5], [0.3, 0.7]]),
                                          "x", atol=0.1)


def test_held_tokens_whatever_the_order():
    q, k, v = checks_15.random_kv(2, 2, 6, 3, seed=0)
    cache = FullCache()
    order = torch.tensor([4, 0, 5])
    cache.k, cache.v = k[:, :, order], v[:, :, order]
    assert checks_15.held_tokens(cache, k, v, "c") == [4, 0, 5]
    checks_15.check_cache_holds(cache, [0, 4, 5], k, v, "c")
    cache.v = v[:, :, torch.tensor([4, 5, 0])]                      # values not with their keys
    with pytest.raises(AssertionError, match="same token"):
        checks_15.held_tokens(cache, k, v, "c")


def test_attend_over_cache_is_softmax_attention_without_bias():
    q, k, v = checks_15.random_kv(1, 2, 5, 4, seed=1)
    pos = torch.arange(5)
    out = checks_15.attend_over_cache(q, k, v, pos, pos, torch.zeros(2, 3))
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6)
