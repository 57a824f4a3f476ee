"""Planted-bug submissions and correct alternative styles for lesson 16 (FlashAttention in Triton).

Each bug is the reference cell with one piece changed (``derived``: it fails loudly if the reference
changes under it); ``must_fail`` lists the test cells that must lose points. An empty ``must_fail`` marks
a correct solution in another style, which must keep full marks.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from planting import derived  # noqa: E402

LESSON = "16_flash_attention_triton"


def fwd(*changes):
    return {"flash_forward_kernel": derived(LESSON, "flash_forward_kernel", *changes)}


def dkdv(*changes):
    return {"flash_backward_dkdv_kernel": derived(LESSON, "flash_backward_dkdv_kernel", *changes)}


def dq(*changes):
    return {"flash_backward_dq_kernel": derived(LESSON, "flash_backward_dq_kernel", *changes)}


# -- the forward kernel -------------------------------------------------------------------------
RUNNING_MAX_AT_ZERO = fwd(('m = tl.full([BLOCK_M], float("-inf"), tl.float32)', "m = tl.zeros([BLOCK_M], tl.float32)"))
RESCALE_INVERTED = fwd(("alpha = tl.exp(m - m_new)", "alpha = tl.exp(m_new - m)"))
LSE_WRONG_ROW = fwd(("tl.store(LSE + pid_bh * T + rows,", "tl.store(LSE + rows,"))          # every head writes head 0's rows
DIAGONAL_SKIPPED = fwd(("end = tl.minimum((pid_m + 1) * BLOCK_M, T)", "end = tl.minimum(pid_m * BLOCK_M, T)"))
MASKED_NOT_SKIPPED = fwd(("end = tl.minimum((pid_m + 1) * BLOCK_M, T)", "end = T"))
KV_HEAD_MODULO = fwd(("kv = b * (H // GROUP) + h // GROUP", "kv = b * (H // GROUP) + h % (H // GROUP)"))
KV_HEAD_NO_BATCH = fwd(("kv = b * (H // GROUP) + h // GROUP", "kv = h // GROUP"))      # every sequence reads sequence 0's
CAUSAL_OFF_BY_ONE = fwd(("allowed = allowed & (keys[None, :] <= rows[:, None])",
                         "allowed = allowed & (keys[None, :] < rows[:, None])"))
NO_SCALE_FORWARD = fwd(("s = tl.dot(q, tl.trans(k)) * scale", "s = tl.dot(q, tl.trans(k))"))
RAGGED_KEYS_UNMASKED = fwd(("allowed = keys[None, :] < T                    # the ragged last tile",
                            "allowed = keys[None, :] >= 0"))
ONE_TILE_OF_ALL_KEYS = {"flash_attention_forward": derived(
    LESSON, "flash_attention_forward",
    ("grid = (triton.cdiv(T, block_m), B * H)",
     "block_m = block_n = max(16, triton.next_power_of_2(T))        # one tile: the whole matrix\n"
     "    grid = (triton.cdiv(T, block_m), B * H)"))}

# -- the backward kernels ---------------------------------------------------------------------------
NO_SCALE_BACKWARD = {**dkdv(("dk += tl.dot(tl.trans(ds).to(q.dtype), q) * scale", "dk += tl.dot(tl.trans(ds).to(q.dtype), q)")),
                     **dq(("dq += tl.dot(ds.to(k.dtype), k) * scale", "dq += tl.dot(ds.to(k.dtype), k)"))}
BACKWARD_MASKED_NOT_SKIPPED = dkdv(("begin = (pid_n * BLOCK_N // BLOCK_M) * BLOCK_M", "begin = 0"))
LSE_WRONG_ROW_BACKWARD = dkdv(("lse = tl.load(LSE + bh * T + rows, mask=rows < T, other=0.0)",
                               "lse = tl.load(LSE + b * H * T + rows, mask=rows < T, other=0.0)"))   # head 0's
KV_HEAD_MODULO_BACKWARD = dq(("kv = b * (H // GROUP) + h // GROUP", "kv = b * (H // GROUP) + h % (H // GROUP)"))
D_MISSING = {**dkdv(("ds = p * (dp - d[:, None])", "ds = p * dp")), **dq(("ds = p * (dp - d[:, None])", "ds = p * dp"))}

# a race on dK/dV: one program per (key tile, query head), each STORING its share of the key/value head's dK, dV
DKDV_RACE = {
    "flash_backward_dkdv_kernel": derived(
        LESSON, "flash_backward_dkdv_kernel",
        ("pid_bkv = tl.program_id(1)                     # b * Hkv + kv\n    Hkv = H // GROUP\n    b, kv = pid_bkv // Hkv, pid_bkv % Hkv",
         "pid_bh = tl.program_id(1)                      # b * H + h: one program per query head\n"
         "    Hkv = H // GROUP\n    b, h = pid_bh // H, pid_bh % H\n    kv = h // GROUP\n    pid_bkv = b * Hkv + kv"),
        ("for g in range(0, GROUP):", "for g in range(0, 1):"),
        ("bh = b * H + kv * GROUP + g", "bh = pid_bh + g")),
    "flash_attention_backward": derived(
        LESSON, "flash_attention_backward",
        ("flash_backward_dkdv_kernel[(triton.cdiv(T, block_n), B * Hkv)](", "flash_backward_dkdv_kernel[(triton.cdiv(T, block_n), B * H)](")),
}
DQ_STORED_NOT_ADDED = {     # dQ from the dK/dV programs, with tl.store where an atomic add is needed
    "flash_backward_dkdv_kernel": derived(
        LESSON, "flash_backward_dkdv_kernel",
        ("def flash_backward_dkdv_kernel(Q, K, V, DO, LSE, D, DK, DV, T,", "def flash_backward_dkdv_kernel(Q, K, V, DO, LSE, D, DK, DV, DQ, T,"),
        ("            dk += tl.dot(tl.trans(ds).to(q.dtype), q) * scale              # (BLOCK_N, BLOCK_M) x (BLOCK_M, DH)",
         "            dk += tl.dot(tl.trans(ds).to(q.dtype), q) * scale\n"
         "            tl.store(DQ + q_ptrs, tl.dot(ds, k) * scale, mask=rows[:, None] < T)")),
    "flash_backward_dq_kernel": "# dQ is written by the dK/dV kernel\n",
    "flash_attention_backward": derived(
        LESSON, "flash_attention_backward",
        ("q, k, v, dout, lse, d, dk, dv, T, H, H // Hkv, scale,", "q, k, v, dout, lse, d, dk, dv, dq, T, H, H // Hkv, scale,"),
        ("    flash_backward_dq_kernel[(triton.cdiv(T, block_m), B * H)](\n"
         "        q, k, v, dout, lse, d, dq, T, H, H // Hkv, scale,\n"
         "        CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, DH=Dh)\n", "")),
}

# -- the autograd Function ----------------------------------------------------------------------------
GRADS_SWAPPED = {"flash_attention": derived(LESSON, "flash_attention",
                                            ("return dq, dk, dv, None, None, None", "return dk, dq, dv, None, None, None"))}
BACKWARD_NOT_CAUSAL = {"flash_attention": derived(
    LESSON, "flash_attention",
    ("flash_attention_backward(q, k, v, out, lse, dout, ctx.causal, ctx.block_m, ctx.block_n)",
     "flash_attention_backward(q, k, v, out, lse, dout)"))}

# -- correct alternatives ---------------------------------------------------------------------------
# exp2 with a log2(e) scale (the Triton tutorial's style): scores kept in base-2 units, lse stored in natural log
LOG2E = "1.4426950408889634"
EXP2 = {
    **fwd(("s = tl.dot(q, tl.trans(k)) * scale", f"s = tl.dot(q, tl.trans(k)) * (scale * {LOG2E})      # log2 units"),
          ("alpha = tl.exp(m - m_new)", "alpha = tl.exp2(m - m_new)"),
          ("p = tl.exp(s - m_new[:, None])", "p = tl.exp2(s - m_new[:, None])"),
          ("m + tl.log(l)", f"(m + tl.log2(l)) / {LOG2E}")),
    **dkdv(("s = tl.dot(q, tl.trans(k)) * scale ", f"s = tl.dot(q, tl.trans(k)) * (scale * {LOG2E}) "),
           ('p = tl.exp(tl.where(allowed, s, float("-inf")) - lse[:, None])',
            f'p = tl.exp2(tl.where(allowed, s, float("-inf")) - lse[:, None] * {LOG2E})')),
    **dq(("s = tl.dot(q, tl.trans(k)) * scale", f"s = tl.dot(q, tl.trans(k)) * (scale * {LOG2E})"),
         ('p = tl.exp(tl.where(allowed, s, float("-inf")) - lse[:, None])',
          f'p = tl.exp2(tl.where(allowed, s, float("-inf")) - lse[:, None] * {LOG2E})')),
}

# exponentiate, then mask (overflow warnings from NumPy must cost nothing), and divide by l in PyTorch
EXP_THEN_MASK = {
    **fwd(('s = tl.where(allowed, s, float("-inf"))        # mask BEFORE the exponential: exp(-inf) = 0',
           'm_tile = tl.max(tl.where(allowed, s, float("-inf")), 1)'),
          ("m_new = tl.maximum(m, tl.max(s, 1))", "m_new = tl.maximum(m, m_tile)"),
          ("p = tl.exp(s - m_new[:, None])                 # (BLOCK_M, BLOCK_N)",
           "p = tl.where(allowed, tl.exp(s - m_new[:, None]), 0.0)       # may overflow where masked: discarded")),
}

# dQ by atomics from the dK/dV programs (no second pass), D = rowsum(dO * O) in PyTorch
DQ_ATOMICS = {
    "flash_backward_dkdv_kernel": derived(
        LESSON, "flash_backward_dkdv_kernel",
        ("def flash_backward_dkdv_kernel(Q, K, V, DO, LSE, D, DK, DV, T,", "def flash_backward_dkdv_kernel(Q, K, V, DO, LSE, D, DK, DV, DQ, T,"),
        ("            dk += tl.dot(tl.trans(ds).to(q.dtype), q) * scale              # (BLOCK_N, BLOCK_M) x (BLOCK_M, DH)",
         "            dk += tl.dot(tl.trans(ds).to(q.dtype), q) * scale\n"
         "            tl.atomic_add(DQ + q_ptrs, tl.dot(ds, k) * scale, mask=rows[:, None] < T)   # programs share dQ rows")),
    "flash_backward_dq_kernel": "# dQ is accumulated with atomics by the dK/dV kernel: no second pass\n",
    "flash_attention_backward": derived(
        LESSON, "flash_attention_backward",
        ("dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)",
         "d = (dout.float() * out.float()).sum(-1).contiguous()              # D in PyTorch this time\n"
         "    dq32 = torch.zeros(q.shape, dtype=torch.float32, device=q.device)  # atomics add into zeros\n"
         "    dk, dv = torch.empty_like(k), torch.empty_like(v)"),
        ("q, k, v, dout, lse, d, dk, dv, T, H, H // Hkv, scale,", "q, k, v, dout, lse, d, dk, dv, dq32, T, H, H // Hkv, scale,"),
        ("    flash_backward_dq_kernel[(triton.cdiv(T, block_m), B * H)](\n"
         "        q, k, v, dout, lse, d, dq, T, H, H // Hkv, scale,\n"
         "        CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, DH=Dh)\n"
         "    return dq, dk, dv", "    return dq32.to(q.dtype), dk, dv")),
}

# dK/dV per query head into an (B, H, T, Dh) buffer, summed over the group by PyTorch; a grid function
PER_HEAD_THEN_SUM = {
    "flash_backward_dkdv_kernel": derived(
        LESSON, "flash_backward_dkdv_kernel",
        ("pid_bkv = tl.program_id(1)                     # b * Hkv + kv\n    Hkv = H // GROUP\n    b, kv = pid_bkv // Hkv, pid_bkv % Hkv",
         "pid_bh = tl.program_id(1)                      # b * H + h: one program per query head\n"
         "    Hkv = H // GROUP\n    b, h = pid_bh // H, pid_bh % H\n    kv = h // GROUP\n    pid_bkv = b * Hkv + kv"),
        ("for g in range(0, GROUP):", "for g in range(0, 1):"),
        ("bh = b * H + kv * GROUP + g", "bh = pid_bh + g"),
        ("tl.store(DK + kv_ptrs,", "tl.store(DK + pid_bh * T * DH + keys[:, None] * DH + dims[None, :],"),
        ("tl.store(DV + kv_ptrs,", "tl.store(DV + pid_bh * T * DH + keys[:, None] * DH + dims[None, :],")),
    "flash_attention_backward": derived(
        LESSON, "flash_attention_backward",
        ("dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)",
         "dq = torch.empty_like(q)\n    dk_h, dv_h = torch.empty_like(q), torch.empty_like(q)   # (B, H, T, Dh): a share per query head\n"
         "    grid = lambda meta: (triton.cdiv(T, meta['BLOCK_N']), B * H)"),
        ("flash_backward_dkdv_kernel[(triton.cdiv(T, block_n), B * Hkv)](\n        q, k, v, dout, lse, d, dk, dv,",
         "flash_backward_dkdv_kernel[grid](\n        q, k, v, dout, lse, d, dk_h, dv_h,"),
        ("    return dq, dk, dv",
         "    G = H // Hkv\n    dk = dk_h.view(B, Hkv, G, T, Dh).sum(2)          # the group's shares, added by PyTorch\n"
         "    dv = dv_h.view(B, Hkv, G, T, Dh).sum(2)\n    return dq, dk, dv")),
}

# a shortcut the rules refuse: lesson 12's chunked attention pasted in (PyTorch matrix products). NumPy in the launcher
# is refused too (tests/test_flash_attention_triton.py), and `course grade` marks such a notebook suspicious.
FORWARD_IN_PYTORCH = {"flash_attention_forward": '''
def flash_attention_forward(q, k, v, causal=False, block_m=16, block_n=16):
    B, H, T, Dh = q.shape
    k, v = k.repeat_interleave(H // k.shape[1], 1), v.repeat_interleave(H // v.shape[1], 1)
    m = q.new_full((B, H, T, 1), float("-inf"))
    l, acc = q.new_zeros((B, H, T, 1)), torch.zeros_like(q)
    rows = torch.arange(T)[:, None]
    for start in range(0, T, block_n):
        s = (q @ k[:, :, start:start + block_n].transpose(-2, -1)) / math.sqrt(Dh)
        if causal:
            s = s.masked_fill(torch.arange(start, min(start + block_n, T)) > rows, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        l = l * torch.exp(m - m_new) + p.sum(-1, keepdim=True)
        acc = acc * torch.exp(m - m_new) + p @ v[:, :, start:start + block_n]
        m = m_new
    return acc / l, (m + l.log())[..., 0]
'''}

# -- the work in PyTorch around idle kernels (red team, fourth round) ------------------------------------
PYTORCH_FORWARD_NO_MATMUL = '''
def _tile_dot(a, b):
    """(..., M, D) x (..., N, D) -> (..., M, N), without a matrix product."""
    return (a.unsqueeze(-2) * b.unsqueeze(-3)).sum(-1)


def _valid(i0, i1, j0, j1, causal):
    rows, cols = torch.arange(i0, i1)[:, None], torch.arange(j0, j1)[None, :]
    return cols <= rows if causal else torch.ones(i1 - i0, j1 - j0, dtype=torch.bool)


def flash_attention_forward(q, k, v, causal=False, block_m=16, block_n=16):
    B, H, T, Dh = q.shape
    group = H // k.shape[1]
    kk, vv = k.repeat_interleave(group, 1).float(), v.repeat_interleave(group, 1).float()
    scale = 1.0 / math.sqrt(Dh)
    out = torch.empty_like(q)
    lse = torch.empty((B, H, T), dtype=torch.float32)
    for i0 in range(0, T, block_m):
        i1 = min(i0 + block_m, T)
        qi = q[:, :, i0:i1].float()
        m = torch.full((B, H, i1 - i0), float("-inf"))
        l = torch.zeros(B, H, i1 - i0)
        acc = torch.zeros(B, H, i1 - i0, Dh)
        stop = i1 if causal else T
        for j0 in range(0, stop, block_n):
            j1 = min(j0 + block_n, stop)
            ok = _valid(i0, i1, j0, j1, causal)
            s = torch.where(ok, _tile_dot(qi, kk[:, :, j0:j1]) * scale, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            alpha = torch.exp(m - m_new)
            p = torch.where(ok, torch.exp(s - m_new.unsqueeze(-1)), 0.0)
            l = l * alpha + p.sum(-1)
            pv = torch.where(ok.unsqueeze(-1), p.unsqueeze(-1) * vv[:, :, j0:j1].unsqueeze(-3), 0.0)
            acc = acc * alpha.unsqueeze(-1) + pv.sum(-2)
            m = m_new
        out[:, :, i0:i1] = (acc / l.unsqueeze(-1)).to(q.dtype)
        lse[:, :, i0:i1] = m + torch.log(l)
    return out, lse
'''

PYTORCH_BACKWARD_NO_MATMUL = '''
def flash_attention_backward(q, k, v, out, lse, dout, causal=False, block_m=16, block_n=16):
    B, H, T, Dh = q.shape
    Hkv = k.shape[1]
    group = H // Hkv
    kk, vv = k.repeat_interleave(group, 1).float(), v.repeat_interleave(group, 1).float()
    qf, of, dof, lf = q.float(), out.float(), dout.float(), lse.float()
    scale = 1.0 / math.sqrt(Dh)
    dq = torch.zeros(B, H, T, Dh)
    dk = torch.zeros(B, H, T, Dh)
    dv = torch.zeros(B, H, T, Dh)
    for i0 in range(0, T, block_m):
        i1 = min(i0 + block_m, T)
        qi, doi, li = qf[:, :, i0:i1], dof[:, :, i0:i1], lf[:, :, i0:i1]
        di = (doi * of[:, :, i0:i1]).sum(-1)
        stop = i1 if causal else T
        for j0 in range(0, stop, block_n):
            j1 = min(j0 + block_n, stop)
            ok = _valid(i0, i1, j0, j1, causal)
            kj, vj = kk[:, :, j0:j1], vv[:, :, j0:j1]
            s = _tile_dot(qi, kj) * scale
            p = torch.where(ok, torch.exp(s - li.unsqueeze(-1)), 0.0)
            okx = ok.unsqueeze(-1)
            dv[:, :, j0:j1] += torch.where(okx, p.unsqueeze(-1) * doi.unsqueeze(-2), 0.0).sum(-3)
            dp = _tile_dot(doi, vj)
            ds = torch.where(ok, p * (dp - di.unsqueeze(-1)), 0.0)
            dq[:, :, i0:i1] += scale * torch.where(okx, ds.unsqueeze(-1) * kj.unsqueeze(-3), 0.0).sum(-2)
            dk[:, :, j0:j1] += scale * torch.where(okx, ds.unsqueeze(-1) * qi.unsqueeze(-2), 0.0).sum(-3)
    dk = dk.reshape(B, Hkv, group, T, Dh).sum(2)
    dv = dv.reshape(B, Hkv, group, T, Dh).sum(2)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
'''

VARIANTS = {
    "running_max_at_zero": {"replace": RUNNING_MAX_AT_ZERO, "must_fail": ["test_forward_stable"]},
    "rescale_inverted": {"replace": RESCALE_INVERTED, "must_fail": ["test_forward_matches_sdpa"]},
    "lse_wrong_row": {"replace": LSE_WRONG_ROW, "must_fail": ["test_forward_lse"]},
    "diagonal_tile_skipped": {"replace": DIAGONAL_SKIPPED, "must_fail": ["test_forward_causal"]},
    "causal_masked_not_skipped": {"replace": MASKED_NOT_SKIPPED, "must_fail": ["test_forward_causal_skips"]},
    # One grouped-heads slip fails the cells that add float16, strided views and autograd on grouped inputs too:
    # their messages must say that the plain case fails on those inputs, not blame what the cell adds.
    "kv_head_modulo": {"replace": KV_HEAD_MODULO,
                       "must_fail": ["test_forward_gqa", "test_forward_shapes", "test_forward_matches_sdpa",
                                     "test_flash_attention_autograd"],
                       "says": {"test_forward_shapes": "float16 is not what is wrong",
                                "test_forward_matches_sdpa": "the memory layout is not what is wrong",
                                "test_flash_attention_autograd": "fix the forward first"}},
    "kv_head_no_batch_offset": {"replace": KV_HEAD_NO_BATCH,
                                "must_fail": ["test_forward_gqa", "test_forward_matches_sdpa", "test_forward_lse"],
                                "says": {"test_forward_gqa": "b * Hkv", "test_forward_lse": "where L is stored is not",
                                         "test_forward_matches_sdpa": "B = 2 sequences"}},
    "no_scale_backward": {"replace": NO_SCALE_BACKWARD, "must_fail": ["test_backward_matches_sdpa"]},
    "dkdv_race": {"replace": DKDV_RACE, "must_fail": ["test_backward_gqa"]},
    "backward_masked_not_skipped": {"replace": BACKWARD_MASKED_NOT_SKIPPED, "must_fail": ["test_backward_causal_skips"]},
    "grads_swapped": {"replace": GRADS_SWAPPED, "must_fail": ["test_flash_attention_autograd"]},
    # correct alternatives
    "exp2_style": {"replace": EXP2, "must_fail": []},
    "dq_by_atomics": {"replace": DQ_ATOMICS, "must_fail": []},
    "per_head_dkdv_then_sum": {"replace": PER_HEAD_THEN_SUM, "must_fail": []},
    "exp_then_mask": {"replace": EXP_THEN_MASK, "must_fail": []},
    # extended bank (COURSE_PLANTED=all)
    "causal_off_by_one": {"replace": CAUSAL_OFF_BY_ONE, "must_fail": ["test_forward_causal"]},
    "no_scale_forward": {"replace": NO_SCALE_FORWARD, "must_fail": ["test_forward_matches_sdpa"]},
    "ragged_keys_unmasked": {"replace": RAGGED_KEYS_UNMASKED, "must_fail": ["test_forward_matches_sdpa"]},
    "one_tile_of_all_keys": {"replace": ONE_TILE_OF_ALL_KEYS, "must_fail": ["test_forward_no_full_matrix"]},
    "lse_wrong_row_backward": {"replace": LSE_WRONG_ROW_BACKWARD, "must_fail": ["test_backward_matches_sdpa"]},
    "kv_head_modulo_backward": {"replace": KV_HEAD_MODULO_BACKWARD,
                                "must_fail": ["test_backward_gqa", "test_flash_attention_autograd"],
                                "says": {"test_flash_attention_autograd": "backward kernels are what is wrong"}},
    "d_missing": {"replace": D_MISSING, "must_fail": ["test_backward_matches_sdpa"]},
    "dq_stored_not_added": {"replace": DQ_STORED_NOT_ADDED, "must_fail": ["test_backward_matches_sdpa"]},
    "backward_not_causal": {"replace": BACKWARD_NOT_CAUSAL, "must_fail": ["test_flash_attention_autograd"]},
    "forward_in_pytorch": {"replace": FORWARD_IN_PYTORCH, "must_fail": ["test_forward_matches_sdpa", "test_forward_no_full_matrix"]},
    # audit 4: the launcher does not make q, k and v contiguous (a transposed view is read as if it were)
    "launcher_not_contiguous": {"replace": {"flash_attention_forward": derived(
        LESSON, "flash_attention_forward",
        ("    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()      # the kernel's pointer arithmetic assumes it\n", ""))},
        "must_fail": ["test_forward_matches_sdpa"]},
    # audit 4: out always float32 and lse in q's dtype, the docstring's dtypes swapped (alike in float32)
    "output_dtypes_swapped": {"replace": {"flash_attention_forward": derived(
        LESSON, "flash_attention_forward",
        ("out = torch.empty_like(q)", "out = torch.empty(q.shape, dtype=torch.float32, device=q.device)"),
        ("lse = torch.empty((B, H, T), dtype=torch.float32, device=q.device)",
         "lse = torch.empty((B, H, T), dtype=q.dtype, device=q.device)"))},
        "must_fail": ["test_forward_shapes"]},
    # red team 4: the released kernels left as stubs, both launchers in plain PyTorch with the score tiles as
    # broadcast multiply-and-sum (no matrix product named): 30/30 before the kernels had to do the work
    "launchers_in_pytorch_no_kernel": {"replace": {"flash_attention_forward": PYTORCH_FORWARD_NO_MATMUL,
                                                   "flash_attention_backward": PYTORCH_BACKWARD_NO_MATMUL},
                                       "must_fail": ["test_forward_shapes", "test_forward_matches_sdpa", "test_forward_lse",
                                                     "test_forward_causal", "test_forward_gqa", "test_forward_no_full_matrix",
                                                     "test_backward_shapes", "test_backward_matches_sdpa",
                                                     "test_backward_causal", "test_backward_gqa",
                                                     "test_backward_no_full_matrix", "test_flash_attention_autograd"]},
}
# make test grades two of the four correct styles (the whole bank: COURSE_PLANTED=all)
EXTENDED = ["dq_by_atomics", "per_head_dkdv_then_sum", "causal_off_by_one", "no_scale_forward", "ragged_keys_unmasked", "one_tile_of_all_keys", "lse_wrong_row_backward",
            "kv_head_modulo_backward", "d_missing", "dq_stored_not_added", "backward_not_causal", "forward_in_pytorch",
            "launcher_not_contiguous", "output_dtypes_swapped", "launchers_in_pytorch_no_kernel"]
