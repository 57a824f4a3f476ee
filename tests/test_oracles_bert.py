"""Unit tests for course.oracles.bert: weight renaming both ways and the mask conversion (no download)."""

import torch

from course.oracles import bert as ob


def test_state_round_trip_and_model_builds():
    torch.manual_seed(0)
    from transformers import BertForPreTraining

    hf = BertForPreTraining(ob.hf_config(30, 16, 2, 32, 2, 12))
    ours = ob.from_hf_state(hf.state_dict())
    assert ours["layers.1.self_attn.in_proj_weight"].shape == (48, 16)
    assert ours["embeddings.token.weight"].shape == (30, 16) and "mlm_bias" in ours and "nsp.weight" in ours
    back = ob.to_hf_state(ours)
    for k, v in hf.state_dict().items():
        if k.endswith("position_ids"):
            continue
        assert torch.equal(back[k], v), k
    again = ob.to_hf_pretraining(ours, 2)
    ids = torch.randint(0, 30, (2, 7))
    seg = (torch.arange(7) > 3).long().expand(2, 7)
    a, b = ob.hf_forward(hf.eval(), ids, seg), ob.hf_forward(again, ids, seg)
    assert torch.equal(a.prediction_logits, b.prediction_logits)
    base = ob.to_hf_model(ours, 2)
    assert base.config._attn_implementation == "eager" and base.config.layer_norm_eps == 1e-12
    emb = ob.from_hf_state(hf.state_dict(), embeddings_only=True)
    assert set(emb) == {"token.weight", "position.weight", "segment.weight", "norm.weight", "norm.bias"}


def test_attention_mask_conversion():
    real = torch.tensor([[True, True, False], [True, False, False]])
    m = ob.hf_attention_mask(real[:, None, None, :], 2, 3)
    assert m.shape == (2, 1, 3, 3)
    assert (m[0, 0, :, :2] == 0).all() and (m[0, 0, :, 2] == torch.finfo(torch.float32).min).all()
    causal = ob.hf_attention_mask(torch.ones(3, 3, dtype=torch.bool).tril(), 2, 3)
    assert causal.shape == (2, 1, 3, 3) and causal[1, 0, 0, 1] < -1e30 and causal[1, 0, 1, 0] == 0
    assert ob.hf_attention_mask(None, 2, 3) is None


def test_missing_names_are_explained():
    try:
        ob.to_hf_state({"token.weight": torch.zeros(3, 2)}, what="your Bert")
    except AssertionError as e:
        assert "embeddings.token.weight" in str(e)
    else:
        raise AssertionError("expected a readable error")
