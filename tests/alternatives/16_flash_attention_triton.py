"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2. Each entry is one learner's whole set of
kernels: it replaces every graded cell (the forward kernel and its launcher, the backward kernels and their
launcher, the autograd Function; the atomic-dQ entry leaves the dQ kernel's cell as handed out, since it needs no
second pass), keeping the cells' given parts (the D kernel, the first lines of ``flash_attention_backward``,
``flash_attention`` and ``attention_gradients``) as given.
"""
LESSON = "16_flash_attention_triton"
VARIANTS = {
    "flash_one_loop_exp_where_style": {
        "blind": True,
        "style": (
            "one loop per pass, the scale on the scores, tl.exp, tl.where masks, l and acc rescaled at every "
            "tile; dK/dV programs loop over the group's query heads, dQ by a second pass; ctx attributes"
        ),
        "replace": {
            "flash_forward_kernel": '''
@triton.jit
def flash_forward_kernel(Q, K, V, O, LSE, T, H, GROUP, scale,
                         CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DH: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    kv_bh = b * (H // GROUP) + h // GROUP
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols0 = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, DH)
    row_ok = rows < T
    q = tl.load(Q + pid_bh * T * DH + rows[:, None] * DH + dims[None, :], mask=row_ok[:, None], other=0.0)
    q = q.to(tl.float32)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, DH), tl.float32)
    hi = T
    if CAUSAL:
        hi = tl.minimum((pid_m + 1) * BLOCK_M, T)
    for start in range(0, hi, BLOCK_N):
        cols = start + cols0
        col_ok = cols < T
        kv_off = kv_bh * T * DH + cols[:, None] * DH + dims[None, :]
        k = tl.load(K + kv_off, mask=col_ok[:, None], other=0.0).to(tl.float32)
        v = tl.load(V + kv_off, mask=col_ok[:, None], other=0.0).to(tl.float32)
        s = tl.dot(q, tl.trans(k)) * scale                          # (BLOCK_M, BLOCK_N)
        allowed = col_ok[None, :]
        if CAUSAL:
            allowed = allowed & (cols[None, :] <= rows[:, None])
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(O + pid_bh * T * DH + rows[:, None] * DH + dims[None, :], out.to(O.dtype.element_ty), mask=row_ok[:, None])
    tl.store(LSE + pid_bh * T + rows, m_i + tl.log(l_i), mask=row_ok)
''',
            "flash_attention_forward": '''
def flash_attention_forward(q, k, v, causal=False, block_m=16, block_n=16):
    B, H, T, Dh = q.shape
    Hkv = k.shape[1]
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    lse = torch.empty((B, H, T), dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(T, block_m), B * H)
    flash_forward_kernel[grid](q, k, v, out, lse, T, H, H // Hkv, 1.0 / math.sqrt(Dh),
                               CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, DH=Dh)
    return out, lse
''',
            "flash_backward_dkdv_kernel": '''
@triton.jit
def flash_backward_dkdv_kernel(Q, K, V, DO, LSE, D, DK, DV, T, H, GROUP, scale,
                               CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               DH: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_bkv = tl.program_id(1)
    Hkv = H // GROUP
    b = pid_bkv // Hkv
    kvh = pid_bkv % Hkv
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows0 = tl.arange(0, BLOCK_M)
    dims = tl.arange(0, DH)
    col_ok = cols < T
    kv_off = pid_bkv * T * DH + cols[:, None] * DH + dims[None, :]
    k = tl.load(K + kv_off, mask=col_ok[:, None], other=0.0).to(tl.float32)
    v = tl.load(V + kv_off, mask=col_ok[:, None], other=0.0).to(tl.float32)
    dk = tl.zeros((BLOCK_N, DH), tl.float32)
    dv = tl.zeros((BLOCK_N, DH), tl.float32)
    lo = 0
    if CAUSAL:
        lo = (pid_n * BLOCK_N // BLOCK_M) * BLOCK_M               # the query tile holding this tile's first key
    for g in range(0, GROUP):
        bh = b * H + kvh * GROUP + g
        for start in range(lo, T, BLOCK_M):
            rows = start + rows0
            row_ok = rows < T
            q_off = bh * T * DH + rows[:, None] * DH + dims[None, :]
            q = tl.load(Q + q_off, mask=row_ok[:, None], other=0.0).to(tl.float32)
            do = tl.load(DO + q_off, mask=row_ok[:, None], other=0.0).to(tl.float32)
            lse = tl.load(LSE + bh * T + rows, mask=row_ok, other=0.0)
            Di = tl.load(D + bh * T + rows, mask=row_ok, other=0.0)
            s = tl.dot(q, tl.trans(k)) * scale                      # (BLOCK_M, BLOCK_N)
            allowed = row_ok[:, None] & col_ok[None, :]
            if CAUSAL:
                allowed = allowed & (cols[None, :] <= rows[:, None])
            s = tl.where(allowed, s, float("-inf"))
            p = tl.exp(s - lse[:, None])
            dv += tl.dot(tl.trans(p), do)
            dp = tl.dot(do, tl.trans(v))
            ds = p * (dp - Di[:, None])
            dk += tl.dot(tl.trans(ds), q)
    tl.store(DK + kv_off, (dk * scale).to(DK.dtype.element_ty), mask=col_ok[:, None])
    tl.store(DV + kv_off, dv.to(DV.dtype.element_ty), mask=col_ok[:, None])
''',
            "flash_backward_dq_kernel": '''
@triton.jit
def flash_backward_dq_kernel(Q, K, V, DO, LSE, D, DQ, T, H, GROUP, scale,
                             CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                             DH: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    kv_bh = b * (H // GROUP) + h // GROUP
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols0 = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, DH)
    row_ok = rows < T
    q_off = pid_bh * T * DH + rows[:, None] * DH + dims[None, :]
    q = tl.load(Q + q_off, mask=row_ok[:, None], other=0.0).to(tl.float32)
    do = tl.load(DO + q_off, mask=row_ok[:, None], other=0.0).to(tl.float32)
    lse = tl.load(LSE + pid_bh * T + rows, mask=row_ok, other=0.0)
    Di = tl.load(D + pid_bh * T + rows, mask=row_ok, other=0.0)
    dq = tl.zeros((BLOCK_M, DH), tl.float32)
    hi = T
    if CAUSAL:
        hi = tl.minimum((pid_m + 1) * BLOCK_M, T)
    for start in range(0, hi, BLOCK_N):
        cols = start + cols0
        col_ok = cols < T
        kv_off = kv_bh * T * DH + cols[:, None] * DH + dims[None, :]
        k = tl.load(K + kv_off, mask=col_ok[:, None], other=0.0).to(tl.float32)
        v = tl.load(V + kv_off, mask=col_ok[:, None], other=0.0).to(tl.float32)
        s = tl.dot(q, tl.trans(k)) * scale
        allowed = row_ok[:, None] & col_ok[None, :]
        if CAUSAL:
            allowed = allowed & (cols[None, :] <= rows[:, None])
        s = tl.where(allowed, s, float("-inf"))
        p = tl.exp(s - lse[:, None])
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - Di[:, None])
        dq += tl.dot(ds, k)
    tl.store(DQ + q_off, (dq * scale).to(DQ.dtype.element_ty), mask=row_ok[:, None])
''',
            "flash_attention_backward": '''
@triton.jit
def flash_backward_d_kernel(O, DO, D, T, BLOCK_M: tl.constexpr, DH: tl.constexpr):
    """Given: D = rowsum(dO * O) for BLOCK_M rows of one (batch, head)."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, DH)
    ptrs = pid_bh * T * DH + rows[:, None] * DH + dims[None, :]
    o = tl.load(O + ptrs, mask=rows[:, None] < T, other=0.0).to(tl.float32)
    do = tl.load(DO + ptrs, mask=rows[:, None] < T, other=0.0).to(tl.float32)
    tl.store(D + pid_bh * T + rows, tl.sum(o * do, 1), mask=rows < T)


def flash_attention_backward(q, k, v, out, lse, dout, causal=False, block_m=16, block_n=16):
    B, H, T, Dh = q.shape
    Hkv = k.shape[1]
    q, k, v, out, dout = (x.contiguous() for x in (q, k, v, out, dout))
    lse = lse.float().contiguous()
    d = torch.empty((B, H, T), dtype=torch.float32, device=q.device)
    flash_backward_d_kernel[(triton.cdiv(T, block_m), B * H)](out, dout, d, T, BLOCK_M=block_m, DH=Dh)
    dq = torch.empty_like(q)
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    scale = 1.0 / math.sqrt(Dh)
    flash_backward_dkdv_kernel[(triton.cdiv(T, block_n), B * Hkv)](
        q, k, v, dout, lse, d, dk, dv, T, H, H // Hkv, scale,
        CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, DH=Dh)
    flash_backward_dq_kernel[(triton.cdiv(T, block_m), B * H)](
        q, k, v, dout, lse, d, dq, T, H, H // Hkv, scale,
        CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, DH=Dh)
    return dq, dk, dv
''',
            "flash_attention": '''
class FlashAttention(torch.autograd.Function):
    """Attention whose forward and backward passes are your Triton kernels."""

    @staticmethod
    def forward(ctx, q, k, v, causal, block_m, block_n):
        out, lse = flash_attention_forward(q, k, v, causal=causal, block_m=block_m, block_n=block_n)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.block_m, ctx.block_n = causal, block_m, block_n
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(q, k, v, out, lse, dout, causal=ctx.causal,
                                              block_m=ctx.block_m, block_n=ctx.block_n)
        return dq, dk, dv, None, None, None


def flash_attention(q, k, v, causal=False, block_m=16, block_n=16):
    """FlashAttention: equal to F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True),
    differentiable, computed by Triton kernels (q (B, H, T, Dh); k, v (B, Hkv, T, Dh))."""
    return FlashAttention.apply(q, k, v, causal, block_m, block_n)


def attention_gradients(q, k, v, dout, causal=False, block_m=16, block_n=16):
    """Given (the tests call it): (dq, dk, dv) of flash_attention for the upstream gradient dout, by autograd."""
    q, k, v = (x.detach().requires_grad_(True) for x in (q, k, v))
    out = flash_attention(q, k, v, causal=causal, block_m=block_m, block_n=block_n)
    return torch.autograd.grad(out, (q, k, v), dout)
''',
        },
        "must_fail": [],
    },
    "flash_exp2_two_phase_atomic_dq_style": {
        "blind": True,
        "style": (
            "exp2 with scale * log2(e) folded into q, a @triton.jit helper per tile, unmasked tiles first then "
            "the masked ones with an additive 0 / -inf bias, lse converted back to natural log; backward in exp2 "
            "with dQ added by tl.atomic_add from the dK/dV programs (a DQ pointer added to that kernel, no dQ "
            "pass; the dQ kernel cell left as handed out); once_differentiable backward honouring "
            "needs_input_grad"
        ),
        "replace": {
            "flash_forward_kernel": '''
@triton.jit
def _tile_update(q, k, v, m_i, l_i, acc, bias, MASKED: tl.constexpr):
    """One key tile of the online softmax, scores in log2 units (q carries scale * log2(e))."""
    s = tl.dot(q, tl.trans(k))
    if MASKED:
        s = s + bias
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p, v)
    return m_new, l_i, acc


@triton.jit
def flash_forward_kernel(Q, K, V, O, LSE, T, H, GROUP, scale,
                         CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DH: tl.constexpr):
    LOG2E = 1.4426950408889634
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    kv_head = (pid_bh // H) * (H // GROUP) + (pid_bh % H) // GROUP
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, DH)
    q = tl.load(Q + pid_bh * T * DH + offs_m[:, None] * DH + offs_d[None, :], mask=offs_m[:, None] < T, other=0.0)
    q = q.to(tl.float32) * (scale * LOG2E)
    k_ptrs = K + kv_head * T * DH + offs_n[:, None] * DH + offs_d[None, :]
    v_ptrs = V + kv_head * T * DH + offs_n[:, None] * DH + offs_d[None, :]
    m_i = tl.zeros((BLOCK_M,), dtype=tl.float32) - float("inf")
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, DH), dtype=tl.float32)
    no_bias = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # tiles that need no mask at all: wholly inside T and (causal) wholly before the program's first row
    if CAUSAL:
        lo = (pid_m * BLOCK_M) // BLOCK_N * BLOCK_N
        hi = tl.minimum((pid_m + 1) * BLOCK_M, T)
    else:
        lo = T // BLOCK_N * BLOCK_N
        hi = T
    for start in range(0, lo, BLOCK_N):
        k = tl.load(k_ptrs + start * DH).to(tl.float32)
        v = tl.load(v_ptrs + start * DH).to(tl.float32)
        m_i, l_i, acc = _tile_update(q, k, v, m_i, l_i, acc, no_bias, False)
    for start in range(lo, hi, BLOCK_N):
        cols = start + offs_n
        k = tl.load(k_ptrs + start * DH, mask=cols[:, None] < T, other=0.0).to(tl.float32)
        v = tl.load(v_ptrs + start * DH, mask=cols[:, None] < T, other=0.0).to(tl.float32)
        keep = (cols[None, :] < T) & (offs_m[:, None] >= 0)
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        bias = tl.where(keep, 0.0, float("-inf"))
        m_i, l_i, acc = _tile_update(q, k, v, m_i, l_i, acc, bias, True)
    o = acc / l_i[:, None]
    tl.store(O + pid_bh * T * DH + offs_m[:, None] * DH + offs_d[None, :], o.to(O.dtype.element_ty),
             mask=offs_m[:, None] < T)
    lse = (m_i + tl.log2(l_i)) / LOG2E                              # back to natural-log units
    tl.store(LSE + pid_bh * T + offs_m, lse, mask=offs_m < T)
''',
            "flash_attention_forward": '''
def flash_attention_forward(q, k, v, causal=False, block_m=16, block_n=16):
    B, H, T, Dh = q.shape
    Hkv = k.shape[1]
    assert H % Hkv == 0, "H must be a multiple of Hkv"
    q, k, v = (t.contiguous() for t in (q, k, v))
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    flash_forward_kernel[(triton.cdiv(T, block_m), B * H)](
        q, k, v, out, lse, T, H, H // Hkv, Dh ** -0.5,
        CAUSAL=bool(causal), BLOCK_M=block_m, BLOCK_N=block_n, DH=Dh)
    return out, lse
''',
            "flash_backward_dkdv_kernel": '''
@triton.jit
def flash_backward_dkdv_kernel(Q, K, V, DO, LSE, D, DK, DV, DQ, T, H, GROUP, scale,
                               CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               DH: tl.constexpr):
    """dK and dV for BLOCK_N keys of one (batch, key/value head); their share of dQ goes into DQ (float32,
    zeroed) with tl.atomic_add, so no second pass is needed."""
    LOG2E = 1.4426950408889634
    pid_n = tl.program_id(0)
    pid_kv = tl.program_id(1)
    Hkv = H // GROUP
    first_head = (pid_kv // Hkv) * H + (pid_kv % Hkv) * GROUP
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, DH)
    kv_ptrs = pid_kv * T * DH + offs_n[:, None] * DH + offs_d[None, :]
    k = tl.load(K + kv_ptrs, mask=offs_n[:, None] < T, other=0.0).to(tl.float32)
    v = tl.load(V + kv_ptrs, mask=offs_n[:, None] < T, other=0.0).to(tl.float32)
    k2 = k * (scale * LOG2E)                                       # scores in log2 units
    dk = tl.zeros((BLOCK_N, DH), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, DH), dtype=tl.float32)
    if CAUSAL:
        start_m = (pid_n * BLOCK_N) // BLOCK_M * BLOCK_M
    else:
        start_m = 0
    for g in range(GROUP):
        bh = first_head + g
        for m0 in range(start_m, T, BLOCK_M):
            offs_m = m0 + offs_m0
            rows_in = offs_m < T
            q_ptrs = bh * T * DH + offs_m[:, None] * DH + offs_d[None, :]
            q = tl.load(Q + q_ptrs, mask=rows_in[:, None], other=0.0).to(tl.float32)
            do = tl.load(DO + q_ptrs, mask=rows_in[:, None], other=0.0).to(tl.float32)
            lse2 = tl.load(LSE + bh * T + offs_m, mask=rows_in, other=0.0) * LOG2E
            d_i = tl.load(D + bh * T + offs_m, mask=rows_in, other=0.0)
            s2 = tl.dot(q, tl.trans(k2))
            ok = rows_in[:, None] & (offs_n[None, :] < T)
            if CAUSAL:
                ok = ok & (offs_n[None, :] <= offs_m[:, None])
            p = tl.exp2(tl.where(ok, s2 - lse2[:, None], float("-inf")))
            dv += tl.dot(tl.trans(p), do)
            ds = p * (tl.dot(do, tl.trans(v)) - d_i[:, None])
            dk += tl.dot(tl.trans(ds), q)
            tl.atomic_add(DQ + q_ptrs, tl.dot(ds, k) * scale, mask=rows_in[:, None])
    tl.store(DK + kv_ptrs, (dk * scale).to(DK.dtype.element_ty), mask=offs_n[:, None] < T)
    tl.store(DV + kv_ptrs, dv.to(DV.dtype.element_ty), mask=offs_n[:, None] < T)
''',
            "flash_attention_backward": '''
@triton.jit
def flash_backward_d_kernel(O, DO, D, T, BLOCK_M: tl.constexpr, DH: tl.constexpr):
    """Given: D = rowsum(dO * O) for BLOCK_M rows of one (batch, head)."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, DH)
    ptrs = pid_bh * T * DH + rows[:, None] * DH + dims[None, :]
    o = tl.load(O + ptrs, mask=rows[:, None] < T, other=0.0).to(tl.float32)
    do = tl.load(DO + ptrs, mask=rows[:, None] < T, other=0.0).to(tl.float32)
    tl.store(D + pid_bh * T + rows, tl.sum(o * do, 1), mask=rows < T)


def flash_attention_backward(q, k, v, out, lse, dout, causal=False, block_m=16, block_n=16):
    B, H, T, Dh = q.shape
    Hkv = k.shape[1]
    q, k, v, out, dout = (x.contiguous() for x in (q, k, v, out, dout))
    lse = lse.float().contiguous()
    d = torch.empty((B, H, T), dtype=torch.float32, device=q.device)
    flash_backward_d_kernel[(triton.cdiv(T, block_m), B * H)](out, dout, d, T, BLOCK_M=block_m, DH=Dh)
    dq32 = torch.zeros((B, H, T, Dh), dtype=torch.float32, device=q.device)     # atomics add into it
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    flash_backward_dkdv_kernel[(triton.cdiv(T, block_n), B * Hkv)](
        q, k, v, dout, lse, d, dk, dv, dq32, T, H, H // Hkv, Dh ** -0.5,
        CAUSAL=bool(causal), BLOCK_M=block_m, BLOCK_N=block_n, DH=Dh)
    return dq32.to(q.dtype), dk, dv
''',
            "flash_attention": '''
class FlashAttention(torch.autograd.Function):
    """Attention whose forward and backward passes are your Triton kernels."""

    @staticmethod
    def forward(ctx, q, k, v, causal, block_m, block_n):
        out, lse = flash_attention_forward(q, k, v, causal, block_m, block_n)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings = (causal, block_m, block_n)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        causal, block_m, block_n = ctx.settings
        dq, dk, dv = flash_attention_backward(q, k, v, out, lse, dout.contiguous(), causal, block_m, block_n)
        need = ctx.needs_input_grad
        return (dq if need[0] else None, dk if need[1] else None, dv if need[2] else None, None, None, None)


def flash_attention(q, k, v, causal=False, block_m=16, block_n=16):
    """FlashAttention: equal to F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True),
    differentiable, computed by Triton kernels (q (B, H, T, Dh); k, v (B, Hkv, T, Dh))."""
    return FlashAttention.apply(q, k, v, causal, block_m, block_n)


def attention_gradients(q, k, v, dout, causal=False, block_m=16, block_n=16):
    """Given (the tests call it): (dq, dk, dv) of flash_attention for the upstream gradient dout, by autograd."""
    q, k, v = (x.detach().requires_grad_(True) for x in (q, k, v))
    out = flash_attention(q, k, v, causal=causal, block_m=block_m, block_n=block_n)
    return torch.autograd.grad(out, (q, k, v), dout)
''',
        },
        "must_fail": [],
    },
    "flash_normalised_output_per_head_buffers_style": {
        "blind": True,
        "style": (
            "FlashAttention-1 bookkeeping (the running output kept normalised, rescaled by l_old * alpha / "
            "l_new), the scale applied to the keys at load time, while loops, a grid lambda; backward: a dK/dV "
            "program per query head into (B, H, T, Dh) float32 buffers that PyTorch sums over the group, dQ by a "
            "second pass; ctx dict of settings"
        ),
        "replace": {
            "flash_forward_kernel": '''
@triton.jit
def flash_forward_kernel(Q, K, V, O, LSE, T, H, GROUP, scale,
                         CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DH: tl.constexpr):
    i = tl.program_id(0)
    bh = tl.program_id(1)
    kv = (bh // H) * (H // GROUP) + (bh % H) // GROUP
    r = i * BLOCK_M + tl.arange(0, BLOCK_M)                         # query rows
    c = tl.arange(0, BLOCK_N)
    d = tl.arange(0, DH)
    q = tl.load(Q + bh * T * DH + r[:, None] * DH + d[None, :], mask=r[:, None] < T, other=0.0).to(tl.float32)
    m = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l = tl.full([BLOCK_M], 0.0, tl.float32)
    o = tl.full([BLOCK_M, DH], 0.0, tl.float32)                    # normalised: the output of the keys so far
    end = T
    if CAUSAL:
        end = tl.minimum(T, (i + 1) * BLOCK_M)
    j0 = 0
    while j0 < end:
        kc = j0 + c
        k = tl.load(K + kv * T * DH + kc[:, None] * DH + d[None, :], mask=kc[:, None] < T, other=0.0)
        k = k.to(tl.float32) * scale                                # the scale goes on the keys
        v = tl.load(V + kv * T * DH + kc[:, None] * DH + d[None, :], mask=kc[:, None] < T, other=0.0)
        s = tl.dot(q, tl.trans(k))
        valid = kc[None, :] < T
        if CAUSAL:
            valid = valid & (kc[None, :] <= r[:, None])
        s = tl.where(valid, s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        l_old_scaled = tl.exp(m - m_new) * l
        l_new = l_old_scaled + tl.sum(p, 1)
        o = o * (l_old_scaled / l_new)[:, None] + tl.dot(p, v.to(tl.float32)) / l_new[:, None]
        m = m_new
        l = l_new
        j0 += BLOCK_N
    tl.store(O + bh * T * DH + r[:, None] * DH + d[None, :], o.to(O.dtype.element_ty), mask=r[:, None] < T)
    tl.store(LSE + bh * T + r, m + tl.log(l), mask=r < T)
''',
            "flash_attention_forward": '''
def flash_attention_forward(q, k, v, causal=False, block_m=16, block_n=16):
    B, H, T, Dh = q.shape
    group = H // k.shape[1]
    q = q.contiguous()
    k = k.contiguous()
    v = v.contiguous()
    out = torch.empty_like(q)
    lse = q.new_empty((B, H, T), dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(T, meta["BLOCK_M"]), B * H)
    flash_forward_kernel[grid](q, k, v, out, lse, T, H, group, 1.0 / Dh ** 0.5,
                               CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, DH=Dh)
    return out, lse
''',
            "flash_backward_dkdv_kernel": '''
@triton.jit
def flash_backward_dkdv_kernel(Q, K, V, DO, LSE, D, DK, DV, T, H, GROUP, scale,
                               CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               DH: tl.constexpr):
    """dK and dV of BLOCK_N keys, from ONE query head: launched on (cdiv(T, BLOCK_N), B * H), DK and DV are
    (B, H, T, DH) buffers (each program writes its own query head's share), summed over the group afterwards."""
    jn = tl.program_id(0)
    bh = tl.program_id(1)
    kv = (bh // H) * (H // GROUP) + (bh % H) // GROUP
    kc = jn * BLOCK_N + tl.arange(0, BLOCK_N)
    rr = tl.arange(0, BLOCK_M)
    d = tl.arange(0, DH)
    kmask = kc[:, None] < T
    k = tl.load(K + kv * T * DH + kc[:, None] * DH + d[None, :], mask=kmask, other=0.0).to(tl.float32) * scale
    v = tl.load(V + kv * T * DH + kc[:, None] * DH + d[None, :], mask=kmask, other=0.0).to(tl.float32)
    dk = tl.zeros([BLOCK_N, DH], tl.float32)
    dv = tl.zeros([BLOCK_N, DH], tl.float32)
    i0 = 0
    if CAUSAL:
        i0 = (jn * BLOCK_N // BLOCK_M) * BLOCK_M
    while i0 < T:
        r = i0 + rr
        rmask = r < T
        q = tl.load(Q + bh * T * DH + r[:, None] * DH + d[None, :], mask=rmask[:, None], other=0.0).to(tl.float32)
        do = tl.load(DO + bh * T * DH + r[:, None] * DH + d[None, :], mask=rmask[:, None], other=0.0).to(tl.float32)
        L = tl.load(LSE + bh * T + r, mask=rmask, other=float("inf"))        # rows past T: exp(s - inf) = 0
        Dr = tl.load(D + bh * T + r, mask=rmask, other=0.0)
        s = tl.dot(q, tl.trans(k))                                           # already scaled (k carries it)
        valid = rmask[:, None] & (kc[None, :] < T)
        if CAUSAL:
            valid = valid & (kc[None, :] <= r[:, None])
        p = tl.exp(tl.where(valid, s, -float("inf")) - L[:, None])
        p = tl.where(valid, p, 0.0)
        dv = dv + tl.dot(tl.trans(p), do)
        ds = p * (tl.dot(do, tl.trans(v)) - Dr[:, None])
        dk = dk + tl.dot(tl.trans(ds), q) * scale
        i0 += BLOCK_M
    out = bh * T * DH + kc[:, None] * DH + d[None, :]
    tl.store(DK + out, dk, mask=kmask)
    tl.store(DV + out, dv, mask=kmask)
''',
            "flash_backward_dq_kernel": '''
@triton.jit
def flash_backward_dq_kernel(Q, K, V, DO, LSE, D, DQ, T, H, GROUP, scale,
                             CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                             DH: tl.constexpr):
    i = tl.program_id(0)
    bh = tl.program_id(1)
    kv = (bh // H) * (H // GROUP) + (bh % H) // GROUP
    r = i * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    d = tl.arange(0, DH)
    rmask = r < T
    q = tl.load(Q + bh * T * DH + r[:, None] * DH + d[None, :], mask=rmask[:, None], other=0.0).to(tl.float32)
    do = tl.load(DO + bh * T * DH + r[:, None] * DH + d[None, :], mask=rmask[:, None], other=0.0).to(tl.float32)
    L = tl.load(LSE + bh * T + r, mask=rmask, other=float("inf"))
    Dr = tl.load(D + bh * T + r, mask=rmask, other=0.0)
    dq = tl.zeros([BLOCK_M, DH], tl.float32)
    end = T
    if CAUSAL:
        end = tl.minimum(T, (i + 1) * BLOCK_M)
    j0 = 0
    while j0 < end:
        kc = j0 + c
        kmask = kc[:, None] < T
        k = tl.load(K + kv * T * DH + kc[:, None] * DH + d[None, :], mask=kmask, other=0.0).to(tl.float32) * scale
        v = tl.load(V + kv * T * DH + kc[:, None] * DH + d[None, :], mask=kmask, other=0.0).to(tl.float32)
        s = tl.dot(q, tl.trans(k))
        valid = rmask[:, None] & (kc[None, :] < T)
        if CAUSAL:
            valid = valid & (kc[None, :] <= r[:, None])
        p = tl.where(valid, tl.exp(tl.where(valid, s, -float("inf")) - L[:, None]), 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - Dr[:, None])
        dq = dq + tl.dot(ds, k)                                  # k already carries the scale
        j0 += BLOCK_N
    tl.store(DQ + bh * T * DH + r[:, None] * DH + d[None, :], dq.to(DQ.dtype.element_ty), mask=rmask[:, None])
''',
            "flash_attention_backward": '''
@triton.jit
def flash_backward_d_kernel(O, DO, D, T, BLOCK_M: tl.constexpr, DH: tl.constexpr):
    """Given: D = rowsum(dO * O) for BLOCK_M rows of one (batch, head)."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, DH)
    ptrs = pid_bh * T * DH + rows[:, None] * DH + dims[None, :]
    o = tl.load(O + ptrs, mask=rows[:, None] < T, other=0.0).to(tl.float32)
    do = tl.load(DO + ptrs, mask=rows[:, None] < T, other=0.0).to(tl.float32)
    tl.store(D + pid_bh * T + rows, tl.sum(o * do, 1), mask=rows < T)


def flash_attention_backward(q, k, v, out, lse, dout, causal=False, block_m=16, block_n=16):
    B, H, T, Dh = q.shape
    Hkv = k.shape[1]
    q, k, v, out, dout = (x.contiguous() for x in (q, k, v, out, dout))
    lse = lse.float().contiguous()
    d = torch.empty((B, H, T), dtype=torch.float32, device=q.device)
    flash_backward_d_kernel[(triton.cdiv(T, block_m), B * H)](out, dout, d, T, BLOCK_M=block_m, DH=Dh)
    group = H // Hkv
    scale = 1.0 / Dh ** 0.5
    dk_heads = torch.empty((B, H, T, Dh), dtype=torch.float32, device=q.device)   # one share per query head
    dv_heads = torch.empty((B, H, T, Dh), dtype=torch.float32, device=q.device)
    flash_backward_dkdv_kernel[(triton.cdiv(T, block_n), B * H)](
        q, k, v, dout, lse, d, dk_heads, dv_heads, T, H, group, scale,
        CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, DH=Dh)
    dq = torch.empty_like(q)
    flash_backward_dq_kernel[(triton.cdiv(T, block_m), B * H)](
        q, k, v, dout, lse, d, dq, T, H, group, scale,
        CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, DH=Dh)
    dk = dk_heads.view(B, Hkv, group, T, Dh).sum(dim=2)
    dv = dv_heads.view(B, Hkv, group, T, Dh).sum(dim=2)
    return dq, dk.to(k.dtype), dv.to(v.dtype)
''',
            "flash_attention": '''
class FlashAttention(torch.autograd.Function):
    """Attention whose forward and backward passes are your Triton kernels."""

    @staticmethod
    def forward(ctx, q, k, v, causal, block_m, block_n):
        out, lse = flash_attention_forward(q, k, v, causal=causal, block_m=block_m, block_n=block_n)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.config = {"causal": causal, "block_m": block_m, "block_n": block_n}
        return out

    @staticmethod
    def backward(ctx, dout):
        saved = ctx.saved_tensors
        grads = flash_attention_backward(*saved, dout, **ctx.config)
        return (*grads, None, None, None)


def flash_attention(q, k, v, causal=False, block_m=16, block_n=16):
    """FlashAttention: equal to F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True),
    differentiable, computed by Triton kernels (q (B, H, T, Dh); k, v (B, Hkv, T, Dh))."""
    return FlashAttention.apply(q, k, v, causal, block_m, block_n)


def attention_gradients(q, k, v, dout, causal=False, block_m=16, block_n=16):
    """Given (the tests call it): (dq, dk, dv) of flash_attention for the upstream gradient dout, by autograd."""
    q, k, v = (x.detach().requires_grad_(True) for x in (q, k, v))
    out = flash_attention(q, k, v, causal=causal, block_m=block_m, block_n=block_n)
    return torch.autograd.grad(out, (q, k, v), dout)
''',
        },
        "must_fail": [],
    },
    "flash_transposed_keys_raw_max_reverse_tiles_style": {
        "blind": True,
        "style": (
            "pointers advanced tile by tile, keys loaded already transposed, a loop over tile indices, the "
            "running max in unscaled units and the scale inside the exponential, ieee float32 dots; backward: "
            "query and key tiles walked from the last to the first, dS scaled before dK, the dQ pass launched "
            "first"
        ),
        "replace": {
            "flash_forward_kernel": '''
@triton.jit
def flash_forward_kernel(Q, K, V, O, LSE, T, H, GROUP, scale,
                         CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DH: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    kv_bh = b * (H // GROUP) + (pid_bh - b * H) // GROUP
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, DH)
    q = tl.load(Q + pid_bh * T * DH + rows[:, None] * DH + dims[None, :], mask=rows[:, None] < T, other=0.0)
    q = q.to(tl.float32)
    kT_ptrs = K + kv_bh * T * DH + dims[:, None] + offs_n[None, :] * DH       # (DH, BLOCK_N): k transposed
    v_ptrs = V + kv_bh * T * DH + offs_n[:, None] * DH + dims[None, :]
    m_raw = tl.full((BLOCK_M,), float("-inf"), tl.float32)                    # max of the UNSCALED scores
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, DH), tl.float32)
    if CAUSAL:
        n_tiles = tl.cdiv(tl.minimum((pid_m + 1) * BLOCK_M, T), BLOCK_N)
    else:
        n_tiles = tl.cdiv(T, BLOCK_N)
    for j in range(n_tiles):
        cols = j * BLOCK_N + offs_n
        kT = tl.load(kT_ptrs, mask=cols[None, :] < T, other=0.0).to(tl.float32)
        v = tl.load(v_ptrs, mask=cols[:, None] < T, other=0.0).to(tl.float32)
        raw = tl.dot(q, kT, input_precision="ieee")                          # q . k, not yet scaled
        ok = cols[None, :] < T
        if CAUSAL:
            ok = ok & (cols[None, :] <= rows[:, None])
        raw = tl.where(ok, raw, float("-inf"))
        m_new = tl.maximum(m_raw, tl.max(raw, axis=1))
        p = tl.exp((raw - m_new[:, None]) * scale)
        alpha = tl.exp((m_raw - m_new) * scale)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_raw = m_new
        kT_ptrs += BLOCK_N * DH
        v_ptrs += BLOCK_N * DH
    tl.store(O + pid_bh * T * DH + rows[:, None] * DH + dims[None, :], (acc / l_i[:, None]).to(O.dtype.element_ty),
             mask=rows[:, None] < T)
    tl.store(LSE + pid_bh * T + rows, m_raw * scale + tl.log(l_i), mask=rows < T)
''',
            "flash_attention_forward": '''
def flash_attention_forward(q, k, v, causal=False, block_m=16, block_n=16):
    B, H, T, Dh = q.shape
    Hkv = k.shape[1]
    if H % Hkv:
        raise ValueError(f"H = {H} is not a multiple of Hkv = {Hkv}")
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = q.new_empty(q.shape)
    lse = torch.empty(B, H, T, device=q.device, dtype=torch.float32)
    n_m = (T + block_m - 1) // block_m
    flash_forward_kernel[(n_m, B * H)](q, k, v, out, lse, T, H, H // Hkv, float(Dh) ** -0.5,
                                       CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, DH=Dh)
    return out, lse
''',
            "flash_backward_dkdv_kernel": '''
@triton.jit
def flash_backward_dkdv_kernel(Q, K, V, DO, LSE, D, DK, DV, T, H, GROUP, scale,
                               CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               DH: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_kv = tl.program_id(1)
    n_kv = H // GROUP
    b = pid_kv // n_kv
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    dims = tl.arange(0, DH)
    col_in = cols < T
    kv_ptrs = pid_kv * T * DH + cols[:, None] * DH + dims[None, :]
    k = tl.load(K + kv_ptrs, mask=col_in[:, None], other=0.0).to(tl.float32)
    v = tl.load(V + kv_ptrs, mask=col_in[:, None], other=0.0).to(tl.float32)
    dk = tl.zeros((BLOCK_N, DH), tl.float32)
    dv = tl.zeros((BLOCK_N, DH), tl.float32)
    n_q_tiles = tl.cdiv(T, BLOCK_M)
    first = 0
    if CAUSAL:
        first = (pid_n * BLOCK_N) // BLOCK_M
    for g in range(GROUP):
        bh = b * H + (pid_kv - b * n_kv) * GROUP + g
        for back in range(0, n_q_tiles - first):
            t = n_q_tiles - 1 - back                                 # query tiles from the last one down
            rows = t * BLOCK_M + offs_m
            row_in = rows < T
            q_ptrs = bh * T * DH + rows[:, None] * DH + dims[None, :]
            q = tl.load(Q + q_ptrs, mask=row_in[:, None], other=0.0).to(tl.float32)
            do = tl.load(DO + q_ptrs, mask=row_in[:, None], other=0.0).to(tl.float32)
            lse = tl.load(LSE + bh * T + rows, mask=row_in, other=0.0)
            delta = tl.load(D + bh * T + rows, mask=row_in, other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
            ok = row_in[:, None] & col_in[None, :]
            if CAUSAL:
                ok = ok & (rows[:, None] >= cols[None, :])
            p = tl.exp(tl.where(ok, s, float("-inf")) - lse[:, None])
            dv += tl.dot(tl.trans(p), do, input_precision="ieee")
            dp = tl.dot(do, tl.trans(v), input_precision="ieee")
            ds = p * (dp - delta[:, None]) * scale
            dk += tl.dot(tl.trans(ds), q, input_precision="ieee")
    tl.store(DK + kv_ptrs, dk.to(DK.dtype.element_ty), mask=col_in[:, None])
    tl.store(DV + kv_ptrs, dv.to(DV.dtype.element_ty), mask=col_in[:, None])
''',
            "flash_backward_dq_kernel": '''
@triton.jit
def flash_backward_dq_kernel(Q, K, V, DO, LSE, D, DQ, T, H, GROUP, scale,
                             CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                             DH: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    kv_bh = b * (H // GROUP) + (pid_bh - b * H) // GROUP
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, DH)
    row_in = rows < T
    q_ptrs = pid_bh * T * DH + rows[:, None] * DH + dims[None, :]
    q = tl.load(Q + q_ptrs, mask=row_in[:, None], other=0.0).to(tl.float32)
    do = tl.load(DO + q_ptrs, mask=row_in[:, None], other=0.0).to(tl.float32)
    lse = tl.load(LSE + pid_bh * T + rows, mask=row_in, other=0.0)
    delta = tl.load(D + pid_bh * T + rows, mask=row_in, other=0.0)
    dq = tl.zeros((BLOCK_M, DH), tl.float32)
    if CAUSAL:
        n_tiles = tl.cdiv(tl.minimum((pid_m + 1) * BLOCK_M, T), BLOCK_N)
    else:
        n_tiles = tl.cdiv(T, BLOCK_N)
    for back in range(n_tiles):
        j = n_tiles - 1 - back                                       # key tiles from the last one down
        cols = j * BLOCK_N + offs_n
        col_in = cols < T
        kv_ptrs = kv_bh * T * DH + cols[:, None] * DH + dims[None, :]
        k = tl.load(K + kv_ptrs, mask=col_in[:, None], other=0.0).to(tl.float32)
        v = tl.load(V + kv_ptrs, mask=col_in[:, None], other=0.0).to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        ok = row_in[:, None] & col_in[None, :]
        if CAUSAL:
            ok = ok & (rows[:, None] >= cols[None, :])
        p = tl.exp(tl.where(ok, s, float("-inf")) - lse[:, None])
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - delta[:, None])
        dq += tl.dot(ds, k, input_precision="ieee")
    tl.store(DQ + q_ptrs, (dq * scale).to(DQ.dtype.element_ty), mask=row_in[:, None])
''',
            "flash_attention_backward": '''
@triton.jit
def flash_backward_d_kernel(O, DO, D, T, BLOCK_M: tl.constexpr, DH: tl.constexpr):
    """Given: D = rowsum(dO * O) for BLOCK_M rows of one (batch, head)."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, DH)
    ptrs = pid_bh * T * DH + rows[:, None] * DH + dims[None, :]
    o = tl.load(O + ptrs, mask=rows[:, None] < T, other=0.0).to(tl.float32)
    do = tl.load(DO + ptrs, mask=rows[:, None] < T, other=0.0).to(tl.float32)
    tl.store(D + pid_bh * T + rows, tl.sum(o * do, 1), mask=rows < T)


def flash_attention_backward(q, k, v, out, lse, dout, causal=False, block_m=16, block_n=16):
    B, H, T, Dh = q.shape
    Hkv = k.shape[1]
    q, k, v, out, dout = (x.contiguous() for x in (q, k, v, out, dout))
    lse = lse.float().contiguous()
    d = torch.empty((B, H, T), dtype=torch.float32, device=q.device)
    flash_backward_d_kernel[(triton.cdiv(T, block_m), B * H)](out, dout, d, T, BLOCK_M=block_m, DH=Dh)
    scale = float(Dh) ** -0.5
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    common = dict(CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, DH=Dh)
    flash_backward_dq_kernel[((T + block_m - 1) // block_m, B * H)](
        q, k, v, dout, lse, d, dq, T, H, H // Hkv, scale, **common)
    flash_backward_dkdv_kernel[((T + block_n - 1) // block_n, B * Hkv)](
        q, k, v, dout, lse, d, dk, dv, T, H, H // Hkv, scale, **common)
    return dq, dk, dv
''',
            "flash_attention": '''
class FlashAttention(torch.autograd.Function):
    """Attention whose forward and backward passes are your Triton kernels."""

    @staticmethod
    def forward(ctx, q, k, v, causal, block_m, block_n):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out, lse = flash_attention_forward(q, k, v, causal, block_m, block_n)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        ctx.blocks = (block_m, block_n)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        block_m, block_n = ctx.blocks
        dq, dk, dv = flash_attention_backward(q, k, v, out, lse, dout, causal=ctx.causal, block_m=block_m,
                                              block_n=block_n)
        return dq, dk, dv, None, None, None


def flash_attention(q, k, v, causal=False, block_m=16, block_n=16):
    """FlashAttention: equal to F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True),
    differentiable, computed by Triton kernels (q (B, H, T, Dh); k, v (B, Hkv, T, Dh))."""
    return FlashAttention.apply(q, k, v, causal, block_m, block_n)


def attention_gradients(q, k, v, dout, causal=False, block_m=16, block_n=16):
    """Given (the tests call it): (dq, dk, dv) of flash_attention for the upstream gradient dout, by autograd."""
    q, k, v = (x.detach().requires_grad_(True) for x in (q, k, v))
    out = flash_attention(q, k, v, causal=causal, block_m=block_m, block_n=block_n)
    return torch.autograd.grad(out, (q, k, v), dout)
''',
        },
        "must_fail": [],
    },
}


# -- correct styles from a careful grader's audit (who read the hidden tests: not blind) --------------------------
# Each replaces the named cells of the reference; graded at full marks on seeds 0-2 (course grade).
VARIANTS.update({
    "audit_backward_default_tiles": {
        "blind": False,
        "style": ('the autograd Function ignores the tile sizes in backward but passes causal (default 16 x 16 tiles): '
                  'the gradients do not depend on the tiles, so this is correct'),
        "replace": {
            'flash_attention': '''
class FlashAttention(torch.autograd.Function):
    """Attention whose forward and backward passes are your Triton kernels."""

    @staticmethod
    def forward(ctx, q, k, v, causal, block_m, block_n):
        """Run flash_attention_forward; save only q, k, v, the output and the log-sum-exp."""
        out, lse = flash_attention_forward(q, k, v, causal, block_m, block_n)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, dout):
        """Run flash_attention_backward; one gradient per input of forward (None for the settings)."""
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(q, k, v, out, lse, dout, ctx.causal)
        return dq, dk, dv, None, None, None


def flash_attention(q, k, v, causal=False, block_m=16, block_n=16):
    """FlashAttention: equal to F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True),
    differentiable, computed by Triton kernels (q (B, H, T, Dh); k, v (B, Hkv, T, Dh))."""
    return FlashAttention.apply(q, k, v, causal, block_m, block_n)


def attention_gradients(q, k, v, dout, causal=False, block_m=16, block_n=16):
    """Given (the tests call it): (dq, dk, dv) of flash_attention for the upstream gradient dout, by autograd."""
    q, k, v = (x.detach().requires_grad_(True) for x in (q, k, v))
    out = flash_attention(q, k, v, causal=causal, block_m=block_m, block_n=block_n)
    return torch.autograd.grad(out, (q, k, v), dout)
''',
        },
        "must_fail": [],
    },
    "audit_reverse_tiles_guarded": {
        "blind": False,
        "style": ('---------------------------------------------------------------- correct alternatives reversed key '
                  'tiles with the fully-masked-first-tile case guarded (a finite reference max)'),
        "replace": {
            'flash_forward_kernel': '''
@triton.jit
def flash_forward_kernel(Q, K, V, O, LSE, T, H, GROUP, scale,
                         CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DH: tl.constexpr):
    """FlashAttention's forward pass for BLOCK_M query rows of one (batch, head).

    Launched on the grid (cdiv(T, BLOCK_M), B * H): program (i, b * H + h) computes output rows
    i * BLOCK_M ... i * BLOCK_M + BLOCK_M - 1 of head h of batch element b.

    Args:
        Q, O: pointers to contiguous (B, H, T, DH) tensors: the queries, and the output to write.
        K, V: pointers to contiguous (B, H // GROUP, T, DH) tensors: keys and values.
        LSE: pointer to a contiguous float32 (B, H, T) tensor: write each row's log-sum-exp there,
            log(sum_j exp(score_ij)) of its scaled scores (natural log).
        T: the sequence length (any positive integer; the last tile is ragged).
        H: the number of query heads; GROUP: query heads per key/value head (H // Hkv). Query head h
            reads key/value head h // GROUP.
        scale: 1 / sqrt(DH), applied to q k^T.
        CAUSAL: if True, query i attends to keys j <= i only, and key tiles that lie wholly after the
            tile's last query are skipped (never loaded).
        BLOCK_M, BLOCK_N: tile sizes (powers of two, at least 16): queries per program, keys per step.
        DH: the head size (a power of two, at least 16).
    """
    pid_m = tl.program_id(0)                       # which query tile
    pid_bh = tl.program_id(1)                      # which (batch, head): b * H + h
    b, h = pid_bh // H, pid_bh % H
    kv = b * (H // GROUP) + h // GROUP             # its key/value head: GROUP query heads share one
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)     # (BLOCK_M,) query positions
    cols = tl.arange(0, BLOCK_N)                       # (BLOCK_N,) key offsets within a tile
    dims = tl.arange(0, DH)                            # (DH,)
    q = tl.load(Q + pid_bh * T * DH + rows[:, None] * DH + dims[None, :], mask=rows[:, None] < T, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max of each row's scores
    l = tl.zeros([BLOCK_M], tl.float32)                # running sum of exp(score - m)
    acc = tl.zeros([BLOCK_M, DH], tl.float32)          # running sum of exp(score - m) * v
    end = T
    if CAUSAL:
        end = tl.minimum((pid_m + 1) * BLOCK_M, T)     # key tiles past the tile's last query: never visited
    n_tiles = tl.cdiv(end, BLOCK_N)
    for t in range(0, n_tiles):
        start = (n_tiles - 1 - t) * BLOCK_N
        keys = start + cols                                                  # (BLOCK_N,) key positions
        kv_ptrs = kv * T * DH + keys[:, None] * DH + dims[None, :]           # (BLOCK_N, DH)
        k = tl.load(K + kv_ptrs, mask=keys[:, None] < T, other=0.0)
        v = tl.load(V + kv_ptrs, mask=keys[:, None] < T, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale             # (BLOCK_M, DH) x (DH, BLOCK_N) -> (BLOCK_M, BLOCK_N)
        allowed = keys[None, :] < T                    # the ragged last tile
        if CAUSAL:
            allowed = allowed & (keys[None, :] <= rows[:, None])
        s = tl.where(allowed, s, float("-inf"))        # mask BEFORE the exponential: exp(-inf) = 0
        m_new = tl.maximum(m, tl.max(s, 1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)      # a row with nothing seen yet
        alpha = tl.exp(m - m_ref)
        p = tl.exp(s - m_ref[:, None])                 # (BLOCK_M, BLOCK_N)
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)    # (BLOCK_M, BLOCK_N) x (BLOCK_N, DH)
        m = m_new
    out = acc / l[:, None]
    tl.store(O + pid_bh * T * DH + rows[:, None] * DH + dims[None, :], out.to(O.dtype.element_ty),
             mask=rows[:, None] < T)
    tl.store(LSE + pid_bh * T + rows, m + tl.log(l), mask=rows < T)      # this row's log-sum-exp
''',
        },
        "must_fail": [],
    },
    "audit_dkdv_square_tiles": {
        "blind": False,
        "style": ('dK/dV programs walk query tiles of BLOCK_N rows (square tiles), starting at their own first key'),
        "replace": {
            'flash_backward_dkdv_kernel': '''
@triton.jit
def flash_backward_dkdv_kernel(Q, K, V, DO, LSE, D, DK, DV, T, H, GROUP, scale,
                               CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               DH: tl.constexpr):
    """dK and dV for BLOCK_N keys of one (batch, key/value head).

    Launched on the grid (cdiv(T, BLOCK_N), B * Hkv). The program owns its keys' dK and dV: it loops
    over the GROUP query heads that read this key/value head and over their query tiles, recomputes
    each tile's weights from q, k and the saved log-sum-exp, and accumulates

        dV += P^T dO,    dS = P * (dO V^T - D),    dK += scale * dS^T Q.

    Args:
        Q, DO: (B, H, T, DH) queries and the gradient of the output; K, V, DK, DV: (B, H // GROUP, T, DH).
        LSE, D: float32 (B, H, T): the forward's log-sum-exp, and D = rowsum(dO * O).
        T, H, GROUP, scale, CAUSAL, BLOCK_M, BLOCK_N, DH: as in flash_forward_kernel. With CAUSAL, query
            tiles wholly before this key tile are skipped.
    """
    pid_n = tl.program_id(0)
    pid_bkv = tl.program_id(1)                     # b * Hkv + kv
    Hkv = H // GROUP
    b, kv = pid_bkv // Hkv, pid_bkv % Hkv
    keys = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, DH)
    kv_ptrs = pid_bkv * T * DH + keys[:, None] * DH + dims[None, :]      # (BLOCK_N, DH)
    k = tl.load(K + kv_ptrs, mask=keys[:, None] < T, other=0.0)
    v = tl.load(V + kv_ptrs, mask=keys[:, None] < T, other=0.0)
    dk = tl.zeros([BLOCK_N, DH], tl.float32)
    dv = tl.zeros([BLOCK_N, DH], tl.float32)
    begin = 0
    if CAUSAL:
        begin = pid_n * BLOCK_N     # query tiles wholly before these keys: skipped
    for g in range(0, GROUP):                              # every query head that reads this key/value head
        bh = b * H + kv * GROUP + g
        for start in range(begin, T, BLOCK_N):
            rows = start + tl.arange(0, BLOCK_N)
            q_ptrs = bh * T * DH + rows[:, None] * DH + dims[None, :]
            q = tl.load(Q + q_ptrs, mask=rows[:, None] < T, other=0.0)
            do = tl.load(DO + q_ptrs, mask=rows[:, None] < T, other=0.0)
            lse = tl.load(LSE + bh * T + rows, mask=rows < T, other=0.0)
            d = tl.load(D + bh * T + rows, mask=rows < T, other=0.0)
            s = tl.dot(q, tl.trans(k)) * scale                             # (BLOCK_M, BLOCK_N)
            allowed = (rows[:, None] < T) & (keys[None, :] < T)
            if CAUSAL:
                allowed = allowed & (keys[None, :] <= rows[:, None])
            p = tl.exp(tl.where(allowed, s, float("-inf")) - lse[:, None])  # the weights, recomputed
            dv += tl.dot(tl.trans(p).to(do.dtype), do)                     # (BLOCK_N, BLOCK_M) x (BLOCK_M, DH)
            dp = tl.dot(do, tl.trans(v))                                   # (BLOCK_M, BLOCK_N)
            ds = p * (dp - d[:, None])                                     # the gradient of the scores
            dk += tl.dot(tl.trans(ds).to(q.dtype), q) * scale              # (BLOCK_N, BLOCK_M) x (BLOCK_M, DH)
    tl.store(DK + kv_ptrs, dk.to(DK.dtype.element_ty), mask=keys[:, None] < T)
    tl.store(DV + kv_ptrs, dv.to(DV.dtype.element_ty), mask=keys[:, None] < T)
''',
        },
        "must_fail": [],
    },
    "audit_normalised_acc": {
        "blind": False,
        "style": ('FlashAttention-1 style: the accumulator kept normalised (divided by l at every tile)'),
        "replace": {
            'flash_forward_kernel': '''
@triton.jit
def flash_forward_kernel(Q, K, V, O, LSE, T, H, GROUP, scale,
                         CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DH: tl.constexpr):
    """FlashAttention's forward pass for BLOCK_M query rows of one (batch, head).

    Launched on the grid (cdiv(T, BLOCK_M), B * H): program (i, b * H + h) computes output rows
    i * BLOCK_M ... i * BLOCK_M + BLOCK_M - 1 of head h of batch element b.

    Args:
        Q, O: pointers to contiguous (B, H, T, DH) tensors: the queries, and the output to write.
        K, V: pointers to contiguous (B, H // GROUP, T, DH) tensors: keys and values.
        LSE: pointer to a contiguous float32 (B, H, T) tensor: write each row's log-sum-exp there,
            log(sum_j exp(score_ij)) of its scaled scores (natural log).
        T: the sequence length (any positive integer; the last tile is ragged).
        H: the number of query heads; GROUP: query heads per key/value head (H // Hkv). Query head h
            reads key/value head h // GROUP.
        scale: 1 / sqrt(DH), applied to q k^T.
        CAUSAL: if True, query i attends to keys j <= i only, and key tiles that lie wholly after the
            tile's last query are skipped (never loaded).
        BLOCK_M, BLOCK_N: tile sizes (powers of two, at least 16): queries per program, keys per step.
        DH: the head size (a power of two, at least 16).
    """
    pid_m = tl.program_id(0)                       # which query tile
    pid_bh = tl.program_id(1)                      # which (batch, head): b * H + h
    b, h = pid_bh // H, pid_bh % H
    kv = b * (H // GROUP) + h // GROUP             # its key/value head: GROUP query heads share one
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)     # (BLOCK_M,) query positions
    cols = tl.arange(0, BLOCK_N)                       # (BLOCK_N,) key offsets within a tile
    dims = tl.arange(0, DH)                            # (DH,)
    q = tl.load(Q + pid_bh * T * DH + rows[:, None] * DH + dims[None, :], mask=rows[:, None] < T, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max of each row's scores
    l = tl.zeros([BLOCK_M], tl.float32)                # running sum of exp(score - m)
    acc = tl.zeros([BLOCK_M, DH], tl.float32)          # running sum of exp(score - m) * v
    end = T
    if CAUSAL:
        end = tl.minimum((pid_m + 1) * BLOCK_M, T)     # key tiles past the tile's last query: never visited
    for start in range(0, end, BLOCK_N):
        keys = start + cols                                                  # (BLOCK_N,) key positions
        kv_ptrs = kv * T * DH + keys[:, None] * DH + dims[None, :]           # (BLOCK_N, DH)
        k = tl.load(K + kv_ptrs, mask=keys[:, None] < T, other=0.0)
        v = tl.load(V + kv_ptrs, mask=keys[:, None] < T, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale             # (BLOCK_M, DH) x (DH, BLOCK_N) -> (BLOCK_M, BLOCK_N)
        allowed = keys[None, :] < T                    # the ragged last tile
        if CAUSAL:
            allowed = allowed & (keys[None, :] <= rows[:, None])
        s = tl.where(allowed, s, float("-inf"))        # mask BEFORE the exponential: exp(-inf) = 0
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp(m - m_new)                      # rescales what was summed under the old max
        p = tl.exp(s - m_new[:, None])                 # (BLOCK_M, BLOCK_N)
        l_new = l * alpha + tl.sum(p, 1)
        acc = (acc * (l * alpha)[:, None] + tl.dot(p.to(v.dtype), v)) / l_new[:, None]   # normalised
        l = l_new
        m = m_new
    out = acc
    tl.store(O + pid_bh * T * DH + rows[:, None] * DH + dims[None, :], out.to(O.dtype.element_ty),
             mask=rows[:, None] < T)
    tl.store(LSE + pid_bh * T + rows, m + tl.log(l), mask=rows < T)      # this row's log-sum-exp
''',
        },
        "must_fail": [],
    },
    "audit_scale_in_exponent": {
        "blind": False,
        "style": ('the scale folded into the exponent: the max is kept on raw scores'),
        "replace": {
            'flash_forward_kernel': '''
@triton.jit
def flash_forward_kernel(Q, K, V, O, LSE, T, H, GROUP, scale,
                         CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DH: tl.constexpr):
    """FlashAttention's forward pass for BLOCK_M query rows of one (batch, head).

    Launched on the grid (cdiv(T, BLOCK_M), B * H): program (i, b * H + h) computes output rows
    i * BLOCK_M ... i * BLOCK_M + BLOCK_M - 1 of head h of batch element b.

    Args:
        Q, O: pointers to contiguous (B, H, T, DH) tensors: the queries, and the output to write.
        K, V: pointers to contiguous (B, H // GROUP, T, DH) tensors: keys and values.
        LSE: pointer to a contiguous float32 (B, H, T) tensor: write each row's log-sum-exp there,
            log(sum_j exp(score_ij)) of its scaled scores (natural log).
        T: the sequence length (any positive integer; the last tile is ragged).
        H: the number of query heads; GROUP: query heads per key/value head (H // Hkv). Query head h
            reads key/value head h // GROUP.
        scale: 1 / sqrt(DH), applied to q k^T.
        CAUSAL: if True, query i attends to keys j <= i only, and key tiles that lie wholly after the
            tile's last query are skipped (never loaded).
        BLOCK_M, BLOCK_N: tile sizes (powers of two, at least 16): queries per program, keys per step.
        DH: the head size (a power of two, at least 16).
    """
    pid_m = tl.program_id(0)                       # which query tile
    pid_bh = tl.program_id(1)                      # which (batch, head): b * H + h
    b, h = pid_bh // H, pid_bh % H
    kv = b * (H // GROUP) + h // GROUP             # its key/value head: GROUP query heads share one
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)     # (BLOCK_M,) query positions
    cols = tl.arange(0, BLOCK_N)                       # (BLOCK_N,) key offsets within a tile
    dims = tl.arange(0, DH)                            # (DH,)
    q = tl.load(Q + pid_bh * T * DH + rows[:, None] * DH + dims[None, :], mask=rows[:, None] < T, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max of each row's scores
    l = tl.zeros([BLOCK_M], tl.float32)                # running sum of exp(score - m)
    acc = tl.zeros([BLOCK_M, DH], tl.float32)          # running sum of exp(score - m) * v
    end = T
    if CAUSAL:
        end = tl.minimum((pid_m + 1) * BLOCK_M, T)     # key tiles past the tile's last query: never visited
    for start in range(0, end, BLOCK_N):
        keys = start + cols                                                  # (BLOCK_N,) key positions
        kv_ptrs = kv * T * DH + keys[:, None] * DH + dims[None, :]           # (BLOCK_N, DH)
        k = tl.load(K + kv_ptrs, mask=keys[:, None] < T, other=0.0)
        v = tl.load(V + kv_ptrs, mask=keys[:, None] < T, other=0.0)
        s = tl.dot(q, tl.trans(k))                     # raw scores             # (BLOCK_M, DH) x (DH, BLOCK_N) -> (BLOCK_M, BLOCK_N)
        allowed = keys[None, :] < T                    # the ragged last tile
        if CAUSAL:
            allowed = allowed & (keys[None, :] <= rows[:, None])
        s = tl.where(allowed, s, float("-inf"))        # mask BEFORE the exponential: exp(-inf) = 0
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp((m - m_new) * scale)                      # rescales what was summed under the old max
        p = tl.exp((s - m_new[:, None]) * scale)                 # (BLOCK_M, BLOCK_N)
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)    # (BLOCK_M, BLOCK_N) x (BLOCK_N, DH)
        m = m_new
    out = acc / l[:, None]
    tl.store(O + pid_bh * T * DH + rows[:, None] * DH + dims[None, :], out.to(O.dtype.element_ty),
             mask=rows[:, None] < T)
    tl.store(LSE + pid_bh * T + rows, m * scale + tl.log(l), mask=rows < T)      # this row's log-sum-exp
''',
        },
        "must_fail": [],
    },
    "audit_broadcast_float64": {
        "blind": False,
        "style": ('no tl.dot: broadcast products summed over the head dimension, accumulated in float64'),
        "replace": {
            'flash_forward_kernel': '''
@triton.jit
def flash_forward_kernel(Q, K, V, O, LSE, T, H, GROUP, scale,
                         CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DH: tl.constexpr):
    """FlashAttention's forward pass for BLOCK_M query rows of one (batch, head).

    Launched on the grid (cdiv(T, BLOCK_M), B * H): program (i, b * H + h) computes output rows
    i * BLOCK_M ... i * BLOCK_M + BLOCK_M - 1 of head h of batch element b.

    Args:
        Q, O: pointers to contiguous (B, H, T, DH) tensors: the queries, and the output to write.
        K, V: pointers to contiguous (B, H // GROUP, T, DH) tensors: keys and values.
        LSE: pointer to a contiguous float32 (B, H, T) tensor: write each row's log-sum-exp there,
            log(sum_j exp(score_ij)) of its scaled scores (natural log).
        T: the sequence length (any positive integer; the last tile is ragged).
        H: the number of query heads; GROUP: query heads per key/value head (H // Hkv). Query head h
            reads key/value head h // GROUP.
        scale: 1 / sqrt(DH), applied to q k^T.
        CAUSAL: if True, query i attends to keys j <= i only, and key tiles that lie wholly after the
            tile's last query are skipped (never loaded).
        BLOCK_M, BLOCK_N: tile sizes (powers of two, at least 16): queries per program, keys per step.
        DH: the head size (a power of two, at least 16).
    """
    pid_m = tl.program_id(0)                       # which query tile
    pid_bh = tl.program_id(1)                      # which (batch, head): b * H + h
    b, h = pid_bh // H, pid_bh % H
    kv = b * (H // GROUP) + h // GROUP             # its key/value head: GROUP query heads share one
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)     # (BLOCK_M,) query positions
    cols = tl.arange(0, BLOCK_N)                       # (BLOCK_N,) key offsets within a tile
    dims = tl.arange(0, DH)                            # (DH,)
    q = tl.load(Q + pid_bh * T * DH + rows[:, None] * DH + dims[None, :], mask=rows[:, None] < T, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float64)  # running max of each row's scores
    l = tl.zeros([BLOCK_M], tl.float64)                # running sum of exp(score - m)
    acc = tl.zeros([BLOCK_M, DH], tl.float64)          # running sum of exp(score - m) * v
    end = T
    if CAUSAL:
        end = tl.minimum((pid_m + 1) * BLOCK_M, T)     # key tiles past the tile's last query: never visited
    for start in range(0, end, BLOCK_N):
        keys = start + cols                                                  # (BLOCK_N,) key positions
        kv_ptrs = kv * T * DH + keys[:, None] * DH + dims[None, :]           # (BLOCK_N, DH)
        k = tl.load(K + kv_ptrs, mask=keys[:, None] < T, other=0.0)
        v = tl.load(V + kv_ptrs, mask=keys[:, None] < T, other=0.0)
        s = tl.sum(q.to(tl.float64)[:, None, :] * k.to(tl.float64)[None, :, :], 2) * scale   # (BLOCK_M, BLOCK_N)
        allowed = keys[None, :] < T                    # the ragged last tile
        if CAUSAL:
            allowed = allowed & (keys[None, :] <= rows[:, None])
        s = tl.where(allowed, s, float("-inf"))        # mask BEFORE the exponential: exp(-inf) = 0
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp(m - m_new)                      # rescales what was summed under the old max
        p = tl.exp(s - m_new[:, None])                 # (BLOCK_M, BLOCK_N)
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v.to(tl.float64)[None, :, :], 1)    # (BLOCK_M, BLOCK_N) x (BLOCK_N, DH)
        m = m_new
    out = acc / l[:, None]
    tl.store(O + pid_bh * T * DH + rows[:, None] * DH + dims[None, :], out.to(O.dtype.element_ty),
             mask=rows[:, None] < T)
    tl.store(LSE + pid_bh * T + rows, (m + tl.log(l)).to(tl.float32), mask=rows < T)      # this row's log-sum-exp
''',
        },
        "must_fail": [],
    },
    "audit_finite_neg_and_unclipped_end": {
        "blind": False,
        "style": ('finite "minus infinity" (-1e30) for the mask and the running max, the causal end not clipped to T'),
        "replace": {
            'flash_forward_kernel': '''
@triton.jit
def flash_forward_kernel(Q, K, V, O, LSE, T, H, GROUP, scale,
                         CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DH: tl.constexpr):
    """FlashAttention's forward pass for BLOCK_M query rows of one (batch, head).

    Launched on the grid (cdiv(T, BLOCK_M), B * H): program (i, b * H + h) computes output rows
    i * BLOCK_M ... i * BLOCK_M + BLOCK_M - 1 of head h of batch element b.

    Args:
        Q, O: pointers to contiguous (B, H, T, DH) tensors: the queries, and the output to write.
        K, V: pointers to contiguous (B, H // GROUP, T, DH) tensors: keys and values.
        LSE: pointer to a contiguous float32 (B, H, T) tensor: write each row's log-sum-exp there,
            log(sum_j exp(score_ij)) of its scaled scores (natural log).
        T: the sequence length (any positive integer; the last tile is ragged).
        H: the number of query heads; GROUP: query heads per key/value head (H // Hkv). Query head h
            reads key/value head h // GROUP.
        scale: 1 / sqrt(DH), applied to q k^T.
        CAUSAL: if True, query i attends to keys j <= i only, and key tiles that lie wholly after the
            tile's last query are skipped (never loaded).
        BLOCK_M, BLOCK_N: tile sizes (powers of two, at least 16): queries per program, keys per step.
        DH: the head size (a power of two, at least 16).
    """
    pid_m = tl.program_id(0)                       # which query tile
    pid_bh = tl.program_id(1)                      # which (batch, head): b * H + h
    b, h = pid_bh // H, pid_bh % H
    kv = b * (H // GROUP) + h // GROUP             # its key/value head: GROUP query heads share one
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)     # (BLOCK_M,) query positions
    cols = tl.arange(0, BLOCK_N)                       # (BLOCK_N,) key offsets within a tile
    dims = tl.arange(0, DH)                            # (DH,)
    q = tl.load(Q + pid_bh * T * DH + rows[:, None] * DH + dims[None, :], mask=rows[:, None] < T, other=0.0)
    m = tl.full([BLOCK_M], -1.0e30, tl.float32)  # running max of each row's scores
    l = tl.zeros([BLOCK_M], tl.float32)                # running sum of exp(score - m)
    acc = tl.zeros([BLOCK_M, DH], tl.float32)          # running sum of exp(score - m) * v
    end = T
    if CAUSAL:
        end = (pid_m + 1) * BLOCK_M     # key tiles past the tile's last query: never visited
    for start in range(0, end, BLOCK_N):
        keys = start + cols                                                  # (BLOCK_N,) key positions
        kv_ptrs = kv * T * DH + keys[:, None] * DH + dims[None, :]           # (BLOCK_N, DH)
        k = tl.load(K + kv_ptrs, mask=keys[:, None] < T, other=0.0)
        v = tl.load(V + kv_ptrs, mask=keys[:, None] < T, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale             # (BLOCK_M, DH) x (DH, BLOCK_N) -> (BLOCK_M, BLOCK_N)
        allowed = keys[None, :] < T                    # the ragged last tile
        if CAUSAL:
            allowed = allowed & (keys[None, :] <= rows[:, None])
        s = tl.where(allowed, s, -1.0e30)        # mask BEFORE the exponential: exp(-inf) = 0
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp(m - m_new)                      # rescales what was summed under the old max
        p = tl.where(allowed, tl.exp(s - m_new[:, None]), 0.0)
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)    # (BLOCK_M, BLOCK_N) x (BLOCK_N, DH)
        m = m_new
    out = acc / l[:, None]
    tl.store(O + pid_bh * T * DH + rows[:, None] * DH + dims[None, :], out.to(O.dtype.element_ty),
             mask=rows[:, None] < T)
    tl.store(LSE + pid_bh * T + rows, m + tl.log(l), mask=rows < T)      # this row's log-sum-exp
''',
        },
        "must_fail": [],
    },
    "audit_grid_swapped": {
        "blind": False,
        "style": ("the grid's axes swapped: (B * H, cdiv(T, BLOCK_M)), read in that order by the kernel"),
        "replace": {
            'flash_forward_kernel': '''
@triton.jit
def flash_forward_kernel(Q, K, V, O, LSE, T, H, GROUP, scale,
                         CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DH: tl.constexpr):
    """FlashAttention's forward pass for BLOCK_M query rows of one (batch, head).

    Launched on the grid (cdiv(T, BLOCK_M), B * H): program (i, b * H + h) computes output rows
    i * BLOCK_M ... i * BLOCK_M + BLOCK_M - 1 of head h of batch element b.

    Args:
        Q, O: pointers to contiguous (B, H, T, DH) tensors: the queries, and the output to write.
        K, V: pointers to contiguous (B, H // GROUP, T, DH) tensors: keys and values.
        LSE: pointer to a contiguous float32 (B, H, T) tensor: write each row's log-sum-exp there,
            log(sum_j exp(score_ij)) of its scaled scores (natural log).
        T: the sequence length (any positive integer; the last tile is ragged).
        H: the number of query heads; GROUP: query heads per key/value head (H // Hkv). Query head h
            reads key/value head h // GROUP.
        scale: 1 / sqrt(DH), applied to q k^T.
        CAUSAL: if True, query i attends to keys j <= i only, and key tiles that lie wholly after the
            tile's last query are skipped (never loaded).
        BLOCK_M, BLOCK_N: tile sizes (powers of two, at least 16): queries per program, keys per step.
        DH: the head size (a power of two, at least 16).
    """
    pid_bh = tl.program_id(0)
    pid_m = tl.program_id(1)                      # which (batch, head): b * H + h
    b, h = pid_bh // H, pid_bh % H
    kv = b * (H // GROUP) + h // GROUP             # its key/value head: GROUP query heads share one
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)     # (BLOCK_M,) query positions
    cols = tl.arange(0, BLOCK_N)                       # (BLOCK_N,) key offsets within a tile
    dims = tl.arange(0, DH)                            # (DH,)
    q = tl.load(Q + pid_bh * T * DH + rows[:, None] * DH + dims[None, :], mask=rows[:, None] < T, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max of each row's scores
    l = tl.zeros([BLOCK_M], tl.float32)                # running sum of exp(score - m)
    acc = tl.zeros([BLOCK_M, DH], tl.float32)          # running sum of exp(score - m) * v
    end = T
    if CAUSAL:
        end = tl.minimum((pid_m + 1) * BLOCK_M, T)     # key tiles past the tile's last query: never visited
    for start in range(0, end, BLOCK_N):
        keys = start + cols                                                  # (BLOCK_N,) key positions
        kv_ptrs = kv * T * DH + keys[:, None] * DH + dims[None, :]           # (BLOCK_N, DH)
        k = tl.load(K + kv_ptrs, mask=keys[:, None] < T, other=0.0)
        v = tl.load(V + kv_ptrs, mask=keys[:, None] < T, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale             # (BLOCK_M, DH) x (DH, BLOCK_N) -> (BLOCK_M, BLOCK_N)
        allowed = keys[None, :] < T                    # the ragged last tile
        if CAUSAL:
            allowed = allowed & (keys[None, :] <= rows[:, None])
        s = tl.where(allowed, s, float("-inf"))        # mask BEFORE the exponential: exp(-inf) = 0
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp(m - m_new)                      # rescales what was summed under the old max
        p = tl.exp(s - m_new[:, None])                 # (BLOCK_M, BLOCK_N)
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)    # (BLOCK_M, BLOCK_N) x (BLOCK_N, DH)
        m = m_new
    out = acc / l[:, None]
    tl.store(O + pid_bh * T * DH + rows[:, None] * DH + dims[None, :], out.to(O.dtype.element_ty),
             mask=rows[:, None] < T)
    tl.store(LSE + pid_bh * T + rows, m + tl.log(l), mask=rows < T)      # this row's log-sum-exp
''',
            'flash_attention_forward': '''
def flash_attention_forward(q, k, v, causal=False, block_m=16, block_n=16):
    """Launch flash_forward_kernel: attention's output and each row's log-sum-exp.

    Args:
        q: queries, (B, H, T, Dh).
        k, v: keys and values, (B, Hkv, T, Dh), with H a multiple of Hkv (grouped-query attention:
            query head h reads key/value head h // (H // Hkv)).
        causal: if True, query i attends to keys j <= i only.
        block_m, block_n: the kernel's tile sizes (powers of two, at least 16).

    Returns:
        (out, lse): out (B, H, T, Dh) in q's dtype, equal to
        ``F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)``; lse (B, H, T) in
        float32, the natural log-sum-exp of each row's scaled scores (what the backward pass needs).
    """
    B, H, T, Dh = q.shape
    Hkv = k.shape[1]
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()      # the kernel's pointer arithmetic assumes it
    out = torch.empty_like(q)
    lse = torch.empty((B, H, T), dtype=torch.float32, device=q.device)
    grid = (B * H, triton.cdiv(T, block_m))                       # a program per (query tile, batch * head)
    flash_forward_kernel[grid](q, k, v, out, lse, T, H, H // Hkv, 1.0 / math.sqrt(Dh),
                               CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, DH=Dh)
    return out, lse
''',
        },
        "must_fail": [],
    },
    "audit_dkdv_unaligned_begin": {
        "blind": False,
        "style": ("dK/dV: the query tiles of the causal pass start exactly at the key tile's first key (not tile-"
                  'aligned)'),
        "replace": {
            'flash_backward_dkdv_kernel': '''
@triton.jit
def flash_backward_dkdv_kernel(Q, K, V, DO, LSE, D, DK, DV, T, H, GROUP, scale,
                               CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               DH: tl.constexpr):
    """dK and dV for BLOCK_N keys of one (batch, key/value head).

    Launched on the grid (cdiv(T, BLOCK_N), B * Hkv). The program owns its keys' dK and dV: it loops
    over the GROUP query heads that read this key/value head and over their query tiles, recomputes
    each tile's weights from q, k and the saved log-sum-exp, and accumulates

        dV += P^T dO,    dS = P * (dO V^T - D),    dK += scale * dS^T Q.

    Args:
        Q, DO: (B, H, T, DH) queries and the gradient of the output; K, V, DK, DV: (B, H // GROUP, T, DH).
        LSE, D: float32 (B, H, T): the forward's log-sum-exp, and D = rowsum(dO * O).
        T, H, GROUP, scale, CAUSAL, BLOCK_M, BLOCK_N, DH: as in flash_forward_kernel. With CAUSAL, query
            tiles wholly before this key tile are skipped.
    """
    pid_n = tl.program_id(0)
    pid_bkv = tl.program_id(1)                     # b * Hkv + kv
    Hkv = H // GROUP
    b, kv = pid_bkv // Hkv, pid_bkv % Hkv
    keys = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, DH)
    kv_ptrs = pid_bkv * T * DH + keys[:, None] * DH + dims[None, :]      # (BLOCK_N, DH)
    k = tl.load(K + kv_ptrs, mask=keys[:, None] < T, other=0.0)
    v = tl.load(V + kv_ptrs, mask=keys[:, None] < T, other=0.0)
    dk = tl.zeros([BLOCK_N, DH], tl.float32)
    dv = tl.zeros([BLOCK_N, DH], tl.float32)
    begin = 0
    if CAUSAL:
        begin = pid_n * BLOCK_N     # query tiles wholly before these keys: skipped
    for g in range(0, GROUP):                              # every query head that reads this key/value head
        bh = b * H + kv * GROUP + g
        for start in range(begin, T, BLOCK_M):
            rows = start + tl.arange(0, BLOCK_M)
            q_ptrs = bh * T * DH + rows[:, None] * DH + dims[None, :]
            q = tl.load(Q + q_ptrs, mask=rows[:, None] < T, other=0.0)
            do = tl.load(DO + q_ptrs, mask=rows[:, None] < T, other=0.0)
            lse = tl.load(LSE + bh * T + rows, mask=rows < T, other=0.0)
            d = tl.load(D + bh * T + rows, mask=rows < T, other=0.0)
            s = tl.dot(q, tl.trans(k)) * scale                             # (BLOCK_M, BLOCK_N)
            allowed = (rows[:, None] < T) & (keys[None, :] < T)
            if CAUSAL:
                allowed = allowed & (keys[None, :] <= rows[:, None])
            p = tl.exp(tl.where(allowed, s, float("-inf")) - lse[:, None])  # the weights, recomputed
            dv += tl.dot(tl.trans(p).to(do.dtype), do)                     # (BLOCK_N, BLOCK_M) x (BLOCK_M, DH)
            dp = tl.dot(do, tl.trans(v))                                   # (BLOCK_M, BLOCK_N)
            ds = p * (dp - d[:, None])                                     # the gradient of the scores
            dk += tl.dot(tl.trans(ds).to(q.dtype), q) * scale              # (BLOCK_N, BLOCK_M) x (BLOCK_M, DH)
    tl.store(DK + kv_ptrs, dk.to(DK.dtype.element_ty), mask=keys[:, None] < T)
    tl.store(DV + kv_ptrs, dv.to(DV.dtype.element_ty), mask=keys[:, None] < T)
''',
        },
        "must_fail": [],
    },
    "audit_dkdv_atomics_per_head": {
        "blind": False,
        "style": ('dK/dV: a program per (key tile, query head), atomically adding its share into zeroed dK, dV'),
        "replace": {
            'flash_backward_dkdv_kernel': '''
@triton.jit
def flash_backward_dkdv_kernel(Q, K, V, DO, LSE, D, DK, DV, T, H, GROUP, scale,
                               CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               DH: tl.constexpr):
    """dK and dV for BLOCK_N keys of one (batch, key/value head).

    Launched on the grid (cdiv(T, BLOCK_N), B * Hkv). The program owns its keys' dK and dV: it loops
    over the GROUP query heads that read this key/value head and over their query tiles, recomputes
    each tile's weights from q, k and the saved log-sum-exp, and accumulates

        dV += P^T dO,    dS = P * (dO V^T - D),    dK += scale * dS^T Q.

    Args:
        Q, DO: (B, H, T, DH) queries and the gradient of the output; K, V, DK, DV: (B, H // GROUP, T, DH).
        LSE, D: float32 (B, H, T): the forward's log-sum-exp, and D = rowsum(dO * O).
        T, H, GROUP, scale, CAUSAL, BLOCK_M, BLOCK_N, DH: as in flash_forward_kernel. With CAUSAL, query
            tiles wholly before this key tile are skipped.
    """
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    Hkv = H // GROUP
    b, h = pid_bh // H, pid_bh % H
    kv = h // GROUP
    pid_bkv = b * Hkv + kv
    keys = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, DH)
    kv_ptrs = pid_bkv * T * DH + keys[:, None] * DH + dims[None, :]      # (BLOCK_N, DH)
    k = tl.load(K + kv_ptrs, mask=keys[:, None] < T, other=0.0)
    v = tl.load(V + kv_ptrs, mask=keys[:, None] < T, other=0.0)
    dk = tl.zeros([BLOCK_N, DH], tl.float32)
    dv = tl.zeros([BLOCK_N, DH], tl.float32)
    begin = 0
    if CAUSAL:
        begin = (pid_n * BLOCK_N // BLOCK_M) * BLOCK_M     # query tiles wholly before these keys: skipped
    for g in range(0, 1):                              # every query head that reads this key/value head
        bh = pid_bh
        for start in range(begin, T, BLOCK_M):
            rows = start + tl.arange(0, BLOCK_M)
            q_ptrs = bh * T * DH + rows[:, None] * DH + dims[None, :]
            q = tl.load(Q + q_ptrs, mask=rows[:, None] < T, other=0.0)
            do = tl.load(DO + q_ptrs, mask=rows[:, None] < T, other=0.0)
            lse = tl.load(LSE + bh * T + rows, mask=rows < T, other=0.0)
            d = tl.load(D + bh * T + rows, mask=rows < T, other=0.0)
            s = tl.dot(q, tl.trans(k)) * scale                             # (BLOCK_M, BLOCK_N)
            allowed = (rows[:, None] < T) & (keys[None, :] < T)
            if CAUSAL:
                allowed = allowed & (keys[None, :] <= rows[:, None])
            p = tl.exp(tl.where(allowed, s, float("-inf")) - lse[:, None])  # the weights, recomputed
            dv += tl.dot(tl.trans(p).to(do.dtype), do)                     # (BLOCK_N, BLOCK_M) x (BLOCK_M, DH)
            dp = tl.dot(do, tl.trans(v))                                   # (BLOCK_M, BLOCK_N)
            ds = p * (dp - d[:, None])                                     # the gradient of the scores
            dk += tl.dot(tl.trans(ds).to(q.dtype), q) * scale              # (BLOCK_N, BLOCK_M) x (BLOCK_M, DH)
    tl.atomic_add(DK + kv_ptrs, dk, mask=keys[:, None] < T)
    tl.atomic_add(DV + kv_ptrs, dv, mask=keys[:, None] < T)
''',
            'flash_attention_backward': '''
@triton.jit
def flash_backward_d_kernel(O, DO, D, T, BLOCK_M: tl.constexpr, DH: tl.constexpr):
    """Given: D = rowsum(dO * O) for BLOCK_M rows of one (batch, head)."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, DH)
    ptrs = pid_bh * T * DH + rows[:, None] * DH + dims[None, :]
    o = tl.load(O + ptrs, mask=rows[:, None] < T, other=0.0).to(tl.float32)
    do = tl.load(DO + ptrs, mask=rows[:, None] < T, other=0.0).to(tl.float32)
    tl.store(D + pid_bh * T + rows, tl.sum(o * do, 1), mask=rows < T)


def flash_attention_backward(q, k, v, out, lse, dout, causal=False, block_m=16, block_n=16):
    """Launch the backward kernels: the gradients of attention for q, k and v.

    Args:
        q, k, v, causal, block_m, block_n: as in flash_attention_forward.
        out: the forward's output, (B, H, T, Dh); lse: its log-sum-exp, float32 (B, H, T).
        dout: the gradient of the loss with respect to out, (B, H, T, Dh).

    Returns:
        (dq, dk, dv) with the shapes and dtypes of q, k and v: what autograd through
        ``F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)`` gives for the
        upstream gradient dout. dk and dv add up the contributions of every query head of the group.
        No (T, T) tensor is made: the weights are recomputed tile by tile from q, k and lse.
    """
    B, H, T, Dh = q.shape
    Hkv = k.shape[1]
    q, k, v, out, dout = (x.contiguous() for x in (q, k, v, out, dout))
    lse = lse.float().contiguous()
    d = torch.empty((B, H, T), dtype=torch.float32, device=q.device)
    flash_backward_d_kernel[(triton.cdiv(T, block_m), B * H)](out, dout, d, T, BLOCK_M=block_m, DH=Dh)
    scale = 1.0 / math.sqrt(Dh)
    dq = torch.empty_like(q)
    dk = torch.zeros(k.shape, dtype=torch.float32, device=k.device)
    dv = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
    flash_backward_dkdv_kernel[(triton.cdiv(T, block_n), B * H)](
        q, k, v, dout, lse, d, dk, dv, T, H, H // Hkv, scale,
        CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, DH=Dh)
    flash_backward_dq_kernel[(triton.cdiv(T, block_m), B * H)](
        q, k, v, dout, lse, d, dq, T, H, H // Hkv, scale,
        CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, DH=Dh)
    return dq, dk.to(k.dtype), dv.to(v.dtype)
''',
        },
        "must_fail": [],
    },
    "audit_autograd_keywords": {
        "blind": False,
        "style": ('the Function saves the settings in a tuple on ctx and calls the launchers by keyword'),
        "replace": {
            'flash_attention': '''
class FlashAttention(torch.autograd.Function):
    """Attention whose forward and backward passes are your Triton kernels."""

    @staticmethod
    def forward(ctx, q, k, v, causal, block_m, block_n):
        """Run flash_attention_forward; save only q, k, v, the output and the log-sum-exp."""
        out, lse = flash_attention_forward(q, k, v, causal=causal, block_m=block_m, block_n=block_n)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings = dict(causal=causal, block_m=block_m, block_n=block_n)
        return out

    @staticmethod
    def backward(ctx, dout):
        """Run flash_attention_backward; one gradient per input of forward (None for the settings)."""
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(q, k, v, out, lse, dout.contiguous(), **ctx.settings)
        return dq, dk, dv, None, None, None


def flash_attention(q, k, v, causal=False, block_m=16, block_n=16):
    """FlashAttention: equal to F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True),
    differentiable, computed by Triton kernels (q (B, H, T, Dh); k, v (B, Hkv, T, Dh))."""
    return FlashAttention.apply(q, k, v, causal, block_m, block_n)


def attention_gradients(q, k, v, dout, causal=False, block_m=16, block_n=16):
    """Given (the tests call it): (dq, dk, dv) of flash_attention for the upstream gradient dout, by autograd."""
    q, k, v = (x.detach().requires_grad_(True) for x in (q, k, v))
    out = flash_attention(q, k, v, causal=causal, block_m=block_m, block_n=block_n)
    return torch.autograd.grad(out, (q, k, v), dout)
''',
        },
        "must_fail": [],
    },
})
