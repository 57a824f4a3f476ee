"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2. The entries marked ``blind: False`` were
written with the hidden tests in view (issue 42), in styles that its new checks could wrongly punish.
"""

LESSON = "12_efficient_attention"
VARIANTS = {
    "chunked_float32_accumulate_where_style": {
        "blind": True, "style": "float32 accumulation, torch.where causal fill, skipped future chunks",
        "replace": {"chunked_attention": '''
def chunked_attention(q, k, v, chunk_size, causal=False):
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    qf = q.float() * scale
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=torch.float32, device=q.device)
    l = torch.zeros_like(m)
    acc = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=torch.float32, device=q.device)
    rows = torch.arange(T_q, device=q.device).unsqueeze(-1)            # (T_q, 1)
    for start in range(0, T_k, chunk_size):
        if causal and start > T_q - 1:
            break                                                        # every query is before this chunk
        stop = min(start + chunk_size, T_k)
        s = qf @ k[..., start:stop, :].float().transpose(-2, -1)        # (..., T_q, c)
        if causal:
            cols = torch.arange(start, stop, device=q.device).unsqueeze(0)
            s = torch.where(cols <= rows, s, torch.tensor(float("-inf"), device=q.device))
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        p = torch.exp(s - m_new)
        alpha = torch.exp(m - m_new)
        l = alpha * l + p.sum(dim=-1, keepdim=True)
        acc = alpha * acc + p @ v[..., start:stop, :].float()
        m = m_new
    return (acc / l).to(q.dtype)
'''},
        "must_fail": [],
    },
    "repeat_kv_expand_reshape_style": {
        "blind": True, "style": "expand a new axis, then reshape",
        "replace": {"repeat_kv": '''
def repeat_kv(x, n_rep):
    B, H_kv, T, Dh = x.shape
    return x[:, :, None, :, :].expand(B, H_kv, n_rep, T, Dh).reshape(B, H_kv * n_rep, T, Dh)
'''},
        "must_fail": [],
    },
    "repeat_kv_index_select_style": {
        "blind": True, "style": "index_select with head // n_rep",
        "replace": {"repeat_kv": '''
def repeat_kv(x, n_rep):
    index = torch.arange(x.shape[1] * n_rep, device=x.device) // n_rep
    return x.index_select(1, index)
'''},
        "must_fail": [],
    },
    "chunked_additive_finfo_min_bias_style": {
        "blind": False, "style": "the causal mask as an additive bias of the dtype's minimum, einsum, key chunks by split",
        "replace": {"chunked_attention": '''
def chunked_attention(q, k, v, chunk_size, causal=False):
    T_q = q.shape[-2]
    neg = torch.finfo(q.dtype).min
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros_like(m)
    acc = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    start = 0
    for k_c, v_c in zip(k.split(chunk_size, dim=-2), v.split(chunk_size, dim=-2)):
        c = k_c.shape[-2]
        s = torch.einsum("...qd,...kd->...qk", q, k_c) / math.sqrt(q.shape[-1])
        if causal:
            future = torch.arange(start, start + c, device=q.device)[None, :] > torch.arange(T_q, device=q.device)[:, None]
            s = s + torch.zeros(future.shape, dtype=s.dtype, device=s.device).masked_fill(future, neg)   # saturates at neg
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        p = torch.exp(s - m_new)
        scale_old = torch.exp(m - m_new)
        l = scale_old * l + p.sum(dim=-1, keepdim=True)
        acc = scale_old * acc + torch.einsum("...qk,...kd->...qd", p, v_c)
        m = m_new
        start += c
    return acc / l
'''},
        "must_fail": [],
    },
}
