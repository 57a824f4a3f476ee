"""Oracles for lesson 10's hidden tests (BERT). Instructor side: never shipped to learners.

The oracle is ``transformers``' own BERT (``BertForPreTraining`` / ``BertModel``, eager attention) with
random weights copied into the learner's ``Bert`` (``course.checks_10.load_hf_weights``). These helpers
run the comparisons of the hidden tests over several sizes and every documented mask shape.
"""

from __future__ import annotations

import torch

from course import checks, checks_10

__all__ = ["compare_bert", "compare_masked", "check_rejects"]


def compare_bert(cls, cfg: dict, *, generator: torch.Generator, hint: str = "") -> None:
    """A fresh ``cls(V, d_model=D, n_heads=H, d_ff=F, n_layers=L, max_len=P)`` holding random transformers
    weights equals ``BertForPreTraining`` on a random batch with two segments (hidden, pooled, MLM, NSP)."""
    V, D, H, F, L, P, B, T = (cfg[k] for k in ("V", "D", "H", "F", "L", "P", "B", "T"))
    hf = checks_10.hf_bert(V, D, H, F, L, P, seed=cfg["seed"])
    model = checks.call(cls, V, d_model=D, n_heads=H, d_ff=F, n_layers=L, max_len=P, what="Bert.__init__").eval()
    checks_10.load_hf_weights(model, hf)
    ids = torch.randint(0, V, (B, T), generator=generator)
    segments = (torch.arange(T) >= torch.randint(1, T, (B, 1), generator=generator)).long()
    want = checks_10.hf_outputs(hf, ids, segments)
    with checks.forbid(cls, *checks_10.SHORTCUTS, why=checks_10.WHY):
        hidden, pooled = checks.call(model.encode, ids, segments, what="Bert.encode")
        mlm, nsp = checks.call(model, ids, segments, what="Bert.forward")
    what = f"your Bert({V}, d_model={D}, n_heads={H}, d_ff={F}, n_layers={L}, max_len={P}) on ids {(B, T)}"
    checks.check_close(hidden, want["hidden"], f"the hidden states of {what} vs BertModel", atol=1e-5, hint=hint)
    checks.check_close(pooled, want["pooled"], f"the pooled vector of {what} vs BertModel", atol=1e-5, hint=hint)
    checks.check_close(mlm, want["mlm"], f"the MLM logits of {what} vs BertForPreTraining", atol=1e-4, hint=hint)
    checks.check_close(nsp, want["nsp"], f"the NSP logits of {what} vs BertForPreTraining", atol=1e-5, hint=hint)


def compare_masked(model, hf, ids, segments, mask, what: str) -> None:
    """The learner's ``model.encode`` with a course-contract ``mask`` equals ``BertModel`` with the same mask
    (as its additive 4-D attention mask), at every position."""
    want = checks_10.hf_outputs(hf, ids, segments, mask)
    hidden, pooled = checks.call(model.encode, ids, segments, mask, what="Bert.encode")
    checks.check_close(hidden, want["hidden"], f"the hidden states of {what} vs transformers", atol=1e-5,
                       hint="a 2-D mask is always (T, T); a 4-D one is (B, 1 or H, T, T), True = allowed; flip it for "
                            "nn.TransformerEncoderLayer and lay a per-head mask out as (B*H, T, T), example-major.")
    checks.check_close(pooled, want["pooled"], f"the pooled vector of {what} vs transformers", atol=1e-5)


def check_rejects(model, ids, segments, mask, what: str) -> None:
    """The learner's ``model.encode`` refuses an ambiguous mask with an error instead of guessing."""
    try:
        model.encode(ids, segments, mask)
    except NotImplementedError:
        raise AssertionError("Bert.encode is not implemented yet.") from None
    except Exception:  # noqa: BLE001 - any error is a refusal
        return
    raise AssertionError(f"your Bert accepted {what} without complaint. A 3-D mask is ambiguous (per example or per "
                         "head?) and must be an error: course.masks.attention_mask does this check.")
