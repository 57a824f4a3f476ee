"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2.
"""

LESSON = "08_transformer"
VARIANTS = {
    "loss_masked_mean_by_hand_style": {
        "blind": True, "style": "per-token cross-entropy, averaged over a float mask of the real targets",
        "replace": {"translation_loss": '''
def translation_loss(model, src, tgt, pad_id=0):
    logits = model(src, tgt[:, :-1], src != pad_id)                    # (B, T, V)
    target = tgt[:, 1:]
    nll = -torch.log_softmax(logits, dim=-1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
    real = (target != pad_id).to(nll.dtype)
    return (nll * real).sum() / real.sum()
'''},
        "must_fail": [],
    },
    "loss_reshape_ignore_index_style": {
        "blind": True, "style": "F.cross_entropy on flattened logits with ignore_index",
        "replace": {"translation_loss": '''
def translation_loss(model, src, tgt, pad_id=0):
    decoder_in, expected = tgt[:, :-1], tgt[:, 1:]
    logits = model.forward(src, decoder_in, src_mask=src.ne(pad_id))
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), expected.reshape(-1), ignore_index=pad_id)
'''},
        "must_fail": [],
    },
    "greedy_finished_flags_style": {
        "blind": True, "style": "a finished flag per row, padding written with torch.where",
        "replace": {"greedy_decode": '''
@torch.no_grad()
def greedy_decode(model, src, max_len, bos_id, eos_id):
    src_mask = src != model.pad_id
    memory = model.encode(src, src_mask)
    B = src.shape[0]
    ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        logits = model.decode(ys, memory, src_mask)
        nxt = logits[:, -1, :].argmax(dim=-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done = done | (nxt == eos_id)
        if bool(done.all()):
            break
    return ys[:, 1:]
'''},
        "must_fail": [],
    },
    "average_stack_mean_style": {
        "blind": True, "style": "torch.stack(...).mean(0), cast back to the dtype",
        "replace": {"average_checkpoints": '''
def average_checkpoints(state_dicts):
    last = state_dicts[-1]
    out = {}
    for name, value in last.items():
        if torch.is_floating_point(value):
            out[name] = torch.stack([sd[name].to(torch.float64) for sd in state_dicts]).mean(dim=0).to(value.dtype)
        else:
            out[name] = value.clone()
    return out
'''},
        "must_fail": [],
    },
    "average_running_sum_style": {
        "blind": True, "style": "a running sum into fresh tensors, divided at the end",
        "replace": {"average_checkpoints": '''
def average_checkpoints(state_dicts):
    n = len(state_dicts)
    totals = {}
    for sd in state_dicts:
        for name, value in sd.items():
            if value.is_floating_point():
                totals[name] = value.detach().clone() if name not in totals else totals[name] + value
    averaged = {}
    for name, value in state_dicts[-1].items():
        averaged[name] = (totals[name] / n).to(value.dtype) if value.is_floating_point() else value.detach().clone()
    return averaged
'''},
        "must_fail": [],
    },
    "beam_python_lists_style": {
        "blind": True, "style": "live hypotheses as Python lists, one decoder call per step on the stacked beam",
        "replace": {"beam_search": '''
@torch.no_grad()
def beam_search(model, src, beam_size, max_len, bos_id, eos_id, length_penalty=0.6):
    src = src.reshape(1, -1)
    src_mask = src != model.pad_id
    memory = model.encode(src, src_mask)
    live = [([], 0.0)]                                   # (tokens without <bos>, log-probability)
    finished = []
    while live:
        ys = torch.tensor([[bos_id] + toks for toks, _ in live], dtype=torch.long, device=src.device)
        n = len(live)
        logp = torch.log_softmax(model.decode(ys, memory.expand(n, -1, -1), src_mask.expand(n, -1))[:, -1, :].double(), dim=-1)
        candidates = []
        for i, (toks, lp) in enumerate(live):
            for tok in range(logp.shape[-1]):
                candidates.append((lp + float(logp[i, tok]), toks + [tok]))
        candidates.sort(key=lambda c: -c[0])
        keep = candidates[:max(beam_size - len(finished), 0)]
        live = []
        for lp, toks in keep:
            if toks[-1] == eos_id or len(toks) >= max_len:
                finished.append((toks, lp))
            else:
                live.append((toks, lp))
    scored = [(toks, lp / (((5 + len(toks)) / 6) ** length_penalty)) for toks, lp in finished]
    return sorted(scored, key=lambda t: -t[1])[:beam_size]
'''},
        "must_fail": [],
    },
}
