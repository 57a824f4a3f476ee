"""Planted-bug submissions and correct alternative styles for lesson 12 (efficient attention).

Each variant replaces whole solution cells (by grade_id) of the reference solution; ``must_fail``
lists the test cells (by grade_id) that must lose points. An empty ``must_fail`` marks a correct
solution in another style, which must keep full marks.
"""

LESSON = "12_efficient_attention"

# --------------------------------------------------------------------------------------------
# chunked_attention: the classic bugs
# --------------------------------------------------------------------------------------------

# The template: a correct key-chunk loop; each bug swaps one piece.
TEMPLATE = '''
def chunked_attention(q, k, v, chunk_size, causal=False):
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))
    l = q.new_zeros((*q.shape[:-1], 1))
    acc = q.new_zeros((*q.shape[:-1], v.shape[-1]))
    q_pos = torch.arange(T_q)[:, None]
    for start in RANGE:
        stop = min(start + chunk_size, T_k)
        scores = (q @ k[..., start:stop, :].transpose(-2, -1)) * scale
        if causal:
            k_pos = KPOS
            scores = scores.masked_fill(MASK, float("-inf"))
        m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
        alpha = torch.exp(m - m_new)
        p = torch.exp(scores - m_new)
        l = L_UPDATE
        acc = alpha * acc + p @ v[..., start:stop, :]
        m = m_new
    return acc / l
'''
PARTS = dict(RANGE="range(0, T_k, chunk_size)", KPOS="torch.arange(start, stop)", MASK="k_pos > q_pos",
             L_UPDATE="alpha * l + p.sum(dim=-1, keepdim=True)")


def chunked(**changes):
    src = TEMPLATE
    for key, value in {**PARTS, **changes}.items():
        src = src.replace(key, value)
    return src


NORMALISE_EACH_CHUNK = '''
def chunked_attention(q, k, v, chunk_size, causal=False):
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    out = q.new_zeros((*q.shape[:-1], v.shape[-1]))
    q_pos = torch.arange(T_q)[:, None]
    n_chunks = 0
    for start in range(0, T_k, chunk_size):
        stop = min(start + chunk_size, T_k)
        scores = (q @ k[..., start:stop, :].transpose(-2, -1)) * scale
        if causal:
            scores = scores.masked_fill(torch.arange(start, stop) > q_pos, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)     # each chunk normalised on its own
        out = out + weights @ v[..., start:stop, :]
        n_chunks += 1
    return out / n_chunks
'''

NO_MAX_SUBTRACTION = '''
def chunked_attention(q, k, v, chunk_size, causal=False):
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    l = q.new_zeros((*q.shape[:-1], 1))
    acc = q.new_zeros((*q.shape[:-1], v.shape[-1]))
    q_pos = torch.arange(T_q)[:, None]
    for start in range(0, T_k, chunk_size):
        stop = min(start + chunk_size, T_k)
        scores = (q @ k[..., start:stop, :].transpose(-2, -1)) * scale
        if causal:
            scores = scores.masked_fill(torch.arange(start, stop) > q_pos, float("-inf"))
        p = torch.exp(scores)                                       # no running max: overflows for large scores
        l = l + p.sum(dim=-1, keepdim=True)
        acc = acc + p @ v[..., start:stop, :]
    return acc / l
'''

FULL_MATRIX = '''
def chunked_attention(q, k, v, chunk_size, causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])       # the whole (T_q, T_k) matrix
    if causal:
        T_q, T_k = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(T_q, T_k, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v
'''

CALLS_SDPA = '''
def chunked_attention(q, k, v, chunk_size, causal=False):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
'''

# --------------------------------------------------------------------------------------------
# chunked_attention: correct alternative styles
# --------------------------------------------------------------------------------------------

QUERY_BLOCKS = '''
def chunked_attention(q, k, v, chunk_size, causal=False):
    """Blocks of queries too (FlashAttention's outer loop), einsum, and causal chunks skipped per block."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5
    outs = []
    for qs in range(0, T_q, chunk_size):
        qe = min(qs + chunk_size, T_q)
        qb = q[..., qs:qe, :] * scale
        m = torch.full((*qb.shape[:-1], 1), -math.inf, dtype=q.dtype)
        l = torch.zeros((*qb.shape[:-1], 1), dtype=q.dtype)
        acc = torch.zeros((*qb.shape[:-1], v.shape[-1]), dtype=q.dtype)
        last_key = min(T_k, qe) if causal else T_k               # keys after the block's last query are never seen
        for ks in range(0, last_key, chunk_size):
            ke = min(ks + chunk_size, last_key)
            s = torch.einsum("...qd,...kd->...qk", qb, k[..., ks:ke, :])
            if causal:
                allowed = torch.arange(ks, ke)[None, :] <= torch.arange(qs, qe)[:, None]
                s = torch.where(allowed, s, torch.tensor(-math.inf, dtype=s.dtype))
            m_new = torch.maximum(m, s.max(dim=-1, keepdim=True).values)
            corr = torch.exp(m - m_new)
            p = torch.exp(s - m_new)
            l = l * corr + p.sum(-1, keepdim=True)
            acc = acc * corr + torch.einsum("...qk,...kd->...qd", p, v[..., ks:ke, :])
            m = m_new
        outs.append(acc / l)
    return torch.cat(outs, dim=-2)
'''

LOGSUMEXP_MERGE = '''
def chunked_attention(q, k, v, chunk_size, causal=False):
    """Each chunk's own softmax output and logsumexp, merged into the running result with torch.logsumexp."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    lse = None
    out = None
    for start in range(0, T_k, chunk_size):
        stop = min(start + chunk_size, T_k)
        s = q @ k[..., start:stop, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            future = torch.arange(start, stop)[None, :] > torch.arange(T_q)[:, None]
            s = s.masked_fill(future, -math.inf)
        lse_c = torch.logsumexp(s, dim=-1, keepdim=True)                 # -inf for a row with no visible key
        safe = torch.where(torch.isinf(lse_c), torch.zeros_like(lse_c), lse_c)
        out_c = torch.exp(s - safe) @ v[..., start:stop, :]               # this chunk's softmax output (0 if none)
        if out is None:
            lse, out = lse_c, out_c
            continue
        new = torch.logsumexp(torch.cat([lse, lse_c], dim=-1), dim=-1, keepdim=True)
        w_old = torch.exp(lse - new).nan_to_num(0.0)
        w_new = torch.exp(lse_c - new).nan_to_num(0.0)
        out = w_old * out + w_new * out_c
        lse = new
    return out
'''

# --------------------------------------------------------------------------------------------
# repeat_kv
# --------------------------------------------------------------------------------------------

REPEAT_TILES = '''
def repeat_kv(x, n_rep):
    return x.repeat(1, n_rep, 1, 1)                 # heads 0, 1, 0, 1, ...: query head h reads kv head h % H_kv
'''

REPEAT_INTERLEAVE = '''
def repeat_kv(x, n_rep):
    return torch.repeat_interleave(x, n_rep, dim=1)
'''

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
from planting import derived as _derived  # noqa: E402

# causal with T_q != T_k: the triangle aligned to the last key (as a KV cache would), not to the start
CAUSAL_BOTTOM_RIGHT = _derived(LESSON, "chunked_attention",
                               ("q_pos = torch.arange(T_q, device=q.device)[:, None]",
                                "q_pos = torch.arange(T_q, device=q.device)[:, None] + (T_k - T_q)"),
                               ("if causal and start > T_q - 1:", "if causal and start > T_k - 1:"))

VARIANTS = {
    "causal_aligned_bottom_right": {"replace": {"chunked_attention": CAUSAL_BOTTOM_RIGHT},
                                    "must_fail": ["test_chunked_attention_causal"]},
    # the online softmax forgets to rescale the running sum when the maximum changes
    "no_rescale_of_sum": {
        "replace": {"chunked_attention": chunked(L_UPDATE="l + p.sum(dim=-1, keepdim=True)")},
        "must_fail": ["test_chunked_attention_matches_sdpa", "test_chunked_attention_online_softmax"],
    },
    # causal boundary off by one: the diagonal is masked too (query 0 sees nothing)
    "causal_excludes_diagonal": {
        "replace": {"chunked_attention": chunked(MASK="k_pos >= q_pos")},
        "must_fail": ["test_chunked_attention_causal"],
    },
    # causal boundary off by one the other way: each query also sees the next key
    "causal_sees_next_key": {
        "replace": {"chunked_attention": chunked(MASK="k_pos > q_pos + 1")},
        "must_fail": ["test_chunked_attention_causal"],
    },
    # the keys' positions counted inside the chunk (0..C-1), not in the sequence
    "causal_chunk_local_positions": {
        "replace": {"chunked_attention": chunked(KPOS="torch.arange(stop - start)")},
        "must_fail": ["test_chunked_attention_causal"],
    },
    "normalise_each_chunk": {
        "replace": {"chunked_attention": NORMALISE_EACH_CHUNK},
        "must_fail": ["test_chunked_attention_matches_sdpa", "test_chunked_attention_online_softmax"],
    },
    # only full chunks: the ragged last chunk is dropped
    "drops_ragged_chunk": {
        "replace": {"chunked_attention": chunked(RANGE="range(0, T_k - chunk_size + 1, chunk_size)")},
        "must_fail": ["test_chunked_attention_ragged"],
    },
    # the running max starts at 0, not -inf: a row whose scores all lie far below zero underflows to 0 / 0
    "running_max_starts_at_zero": {
        "replace": {"chunked_attention": chunked().replace('m = q.new_full((*q.shape[:-1], 1), float("-inf"))',
                                                           "m = q.new_zeros((*q.shape[:-1], 1))")},
        "must_fail": ["test_chunked_attention_online_softmax"],
    },
    "no_max_subtraction": {
        "replace": {"chunked_attention": NO_MAX_SUBTRACTION},
        "must_fail": ["test_chunked_attention_online_softmax"],
    },
    "full_matrix": {
        "replace": {"chunked_attention": FULL_MATRIX},
        "must_fail": ["test_chunked_attention_no_full_matrix"],
    },
    "calls_sdpa": {
        "replace": {"chunked_attention": CALLS_SDPA},
        "must_fail": ["test_chunked_attention_matches_sdpa", "test_chunked_attention_no_full_matrix"],
    },
    "repeat_kv_tiles": {
        "replace": {"repeat_kv": REPEAT_TILES},
        "must_fail": ["test_repeat_kv_grouping"],
    },
    # correct alternatives
    "query_blocks_einsum_style": {"replace": {"chunked_attention": QUERY_BLOCKS}, "must_fail": []},
    "logsumexp_merge_style": {"replace": {"chunked_attention": LOGSUMEXP_MERGE}, "must_fail": []},
    "repeat_interleave_style": {"replace": {"repeat_kv": REPEAT_INTERLEAVE}, "must_fail": []},
}

# ---------------------------------------------------------------------------------------- issue 42
# Float32 accumulation (as fused kernels do): a correct style, and more accurate in low precision than the
# all-bfloat16 reference (section 6 measures both now).
CHUNKED_FP32_ACCUMULATION_STYLE = _derived(LESSON, "chunked_attention",
    ("    T_q, T_k = q.shape[-2], k.shape[-2]\n",
     "    dtype = q.dtype\n    q, k, v = q.float(), k.float(), v.float()              # accumulate in float32\n"
     "    T_q, T_k = q.shape[-2], k.shape[-2]\n"),
    ("    return acc / l\n", "    return (acc / l).to(dtype)\n"))

VARIANTS.update({
    "chunked_fp32_accumulation_style": {"replace": {"chunked_attention": CHUNKED_FP32_ACCUMULATION_STYLE}, "must_fail": []},
})

# ---------------------------------------------------------------------------------------- issue 42 (certificate)
# A survivor of the fairness certificate: the future filled with a finite -1e4, which every visible score near -1e5
# falls below, so the future takes the weight.
VARIANTS["causal_fill_minus_1e4"] = {
    "replace": {"chunked_attention": _derived(LESSON, "chunked_attention",
                                              ('masked_fill(k_pos > q_pos, float("-inf"))', "masked_fill(k_pos > q_pos, -1e4)"))},
    "must_fail": ["test_chunked_attention_causal"],
    "says": {"test_chunked_attention_causal": ["-1e4", "-inf"]},
}
