"""Unit tests for lesson 08's package helpers: the table model, its reference searches, and the experiment tools."""

import itertools
import math

import pytest
import torch

from course import checks_08
from course.data.translation import make_translation_data
from course.models.transformer import CrossAttentionRecorder, GRUCrossAttention, score_by_length, translate_with
from course.tools.references import refs_08


def test_table_model_probabilities_are_the_table():
    m = checks_08.length_penalty_model()
    src = torch.tensor([[3, 4]])
    logp = m(src, torch.tensor([[1, 3]]), src != 0)                      # (1, 2, V)
    assert torch.allclose(logp.exp().sum(-1), torch.ones(1, 2), atol=1e-5)
    assert math.isclose(logp[0, 0, 3].exp().item(), 0.5, abs_tol=1e-5)
    assert math.isclose(logp[0, 1, 2].exp().item(), 0.74, abs_tol=1e-5)
    assert math.isclose(checks_08.sequence_logprob(m, src, [4, 4, 4, 2]), math.log(0.45 * 0.9 * 0.9 * 0.9), abs_tol=1e-4)


def test_table_model_source_padding_matters_only_without_mask():
    m = checks_08.TableModel.random(0)
    src = torch.tensor([[3, 4, 0, 0]])
    tgt = torch.tensor([[1, 3, 4]])
    masked = m(src, tgt, src != 0)
    alone = m(src[:, :2], tgt, torch.ones(1, 2, dtype=torch.bool))
    assert torch.allclose(masked, alone, atol=1e-6)
    assert not torch.allclose(m(src, tgt), masked, atol=1e-2)           # the loud padding scores leak without a mask


def test_exhaustive_search_enumerates_every_sentence():
    m = checks_08.TableModel.random(3)
    src = torch.tensor([3, 4, 5])
    hyps = refs_08.exhaustive(m, src, 3, 0.0)
    V = 5
    assert len(hyps) == 1 + (V - 1) + (V - 1) ** 2 * V                  # <eos> at step 1, at step 2, or anything at step 3
    assert math.isclose(sum(math.exp(s) for _, s in hyps), 1.0, abs_tol=1e-5)   # alpha 0: a probability distribution
    best = max(itertools.product(range(V), repeat=3), key=lambda y: checks_08.sequence_logprob(
        m, src, list(y[: y.index(2) + 1]) if 2 in y else list(y)))
    assert hyps[0][0] == (list(best[: best.index(2) + 1]) if 2 in best else list(best))


@pytest.mark.parametrize("seed", [0, 3, 15])
def test_reference_beam_is_greedy_at_one_and_exhaustive_when_wide(seed):
    m = checks_08.TableModel.random(seed)
    src = torch.tensor([3, 4, 5, 3])
    assert refs_08.beam(m, src, 1, 4, 0.6)[0][0] == refs_08.greedy(m, src, 4)
    wide = refs_08.beam(m, src, 5 ** 4, 4, 0.6)
    exact = refs_08.exhaustive(m, src, 4, 0.6)
    assert [y for y, _ in wide] == [y for y, _ in exact]
    assert refs_08.exhaustive(m, src, 4, 0.6)[0][0] != refs_08.greedy(m, src, 4) or seed not in (0, 3, 15)


def test_length_penalty_model_changes_the_winner():
    m = checks_08.length_penalty_model()
    src = torch.tensor([3, 4])
    assert refs_08.exhaustive(m, src, 5, 0.0)[0][0] == [3, 2]
    assert refs_08.exhaustive(m, src, 5, 0.6)[0][0] == [4, 4, 4, 2]
    assert refs_08.greedy(m, src, 5) == [3, 2]


def test_check_hypotheses_rejects_tokens_after_eos():
    with pytest.raises(AssertionError, match="after <eos>"):
        checks_08.check_hypotheses([([3, 2, 4], -1.0)], "beam", max_len=5)
    with pytest.raises(AssertionError, match="sorted"):
        checks_08.check_hypotheses([([3, 2], -2.0), ([2], -1.0)], "beam", max_len=5)
    assert checks_08.check_hypotheses([(torch.tensor([3, 2]), torch.tensor(-1.0))], "beam", max_len=5) == [([3, 2], -1.0)]


def test_mean_state_dict_and_translation_loss_reference():
    sds = checks_08.random_state_dicts(3)
    avg = refs_08.mean_state_dict(sds)
    assert torch.allclose(avg["embed.weight"], sum(sd["embed.weight"] for sd in sds) / 3)
    assert avg["norm.running_mean"].dtype == torch.float64 and int(avg["norm.num_batches_tracked"]) == 300
    m = checks_08.length_penalty_model()
    loss = refs_08.translation_loss(m, torch.tensor([[3, 4]]), torch.tensor([[1, 3, 2, 0]]))
    assert math.isclose(float(loss), -(math.log(0.5) + math.log(0.74)) / 2, abs_tol=1e-4)


def test_experiment_tools_on_the_table_model():
    data = make_translation_data(n_train=50, n_val=10, n_test=20, max_len=10, seed=0)

    def first_token_then_eos(model, src, max_len, bos_id, eos_id):      # a stand-in decoder with greedy_decode's signature
        return torch.tensor([[4, eos_id]] * src.shape[0])

    hyps = translate_with(first_token_then_eos, torch.nn.Linear(1, 1), data, data.test)
    assert len(hyps) == 20 and all(h == [data.tgt_vocab.itos[4]] for h in hyps)
    scores = score_by_length(data.test, [list(p.tgt) for p in data.test])
    assert scores["exact_match"] == 1.0 and set(scores["by_length"]) <= {"3-8", "9-15", "16+"}
    attn = GRUCrossAttention(6, 8)
    context, weights = attn(torch.randn(2, 6), torch.randn(2, 5, 8), torch.randn(2, 5, 8),
                            torch.tensor([[True] * 5, [True, True, False, False, False]]))
    assert context.shape == (2, 8) and weights.shape == (2, 5)
    assert torch.allclose(weights.sum(-1), torch.ones(2)) and weights[1, 2:].abs().max() == 0


def test_cross_attention_recorder_collects_per_head_maps():
    layer = torch.nn.Module()
    layer.cross_attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    with CrossAttentionRecorder(layer) as rec:
        layer.cross_attn(torch.randn(3, 4, 8), torch.randn(3, 6, 8), torch.randn(3, 6, 8), need_weights=False)
    assert rec.weights[0].shape == (3, 2, 4, 6)
    assert torch.allclose(rec.weights[0].sum(-1), torch.ones(3, 2, 4), atol=1e-5)
    with pytest.raises(ValueError):
        CrossAttentionRecorder(torch.nn.Linear(2, 2))
