"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2.
"""

LESSON = "15_serving"
VARIANTS = {
    "cache_ring_buffer_unsorted_style": {
        "blind": True,
        "style": "sinks in their own tensors, the window in a preallocated ring written at (pos - n_sinks) % window, "
                 "handed back in slot order (positions not sorted)",
        "replace": {"SlidingWindowCache": '''
class SlidingWindowCache:
    def __init__(self, window, n_sinks=0):
        self.window = window
        self.n_sinks = n_sinks
        self.n_seen = 0
        self.sink_k, self.sink_v, self.sink_pos = [], [], []
        self.ring_k = self.ring_v = None
        self.ring_pos = None                 # (window,) absolute positions, -1 for an empty slot

    def _put(self, k1, v1, pos):
        """One token (B, H, Dh) at absolute position pos."""
        if pos < self.n_sinks:
            self.sink_k.append(k1)
            self.sink_v.append(v1)
            self.sink_pos.append(pos)
            return
        if self.ring_k is None:
            B, H = k1.shape[:2]
            self.ring_k = k1.new_zeros(B, H, self.window, k1.shape[-1])
            self.ring_v = v1.new_zeros(B, H, self.window, v1.shape[-1])
            self.ring_pos = torch.full((self.window,), -1, dtype=torch.long, device=k1.device)
        slot = (pos - self.n_sinks) % self.window
        self.ring_k[:, :, slot] = k1
        self.ring_v[:, :, slot] = v1
        self.ring_pos[slot] = pos

    def append(self, k, v):
        for i in range(k.shape[2]):
            self._put(k[:, :, i], v[:, :, i], self.n_seen)
            self.n_seen += 1

    def _filled(self):
        return self.ring_pos >= 0

    def keys(self):
        parts = [torch.stack(self.sink_k, dim=2)] if self.sink_k else []
        if self.ring_k is not None:
            parts.append(self.ring_k[:, :, self._filled()])
        return torch.cat(parts, dim=2)

    def values(self):
        parts = [torch.stack(self.sink_v, dim=2)] if self.sink_v else []
        if self.ring_v is not None:
            parts.append(self.ring_v[:, :, self._filled()])
        return torch.cat(parts, dim=2)

    def positions(self):
        device = self.ring_pos.device if self.ring_pos is not None else self.sink_k[0].device
        parts = [torch.tensor(self.sink_pos, dtype=torch.long, device=device)]
        if self.ring_pos is not None:
            parts.append(self.ring_pos[self._filled()])
        return torch.cat(parts)
'''},
        "must_fail": [],
    },
    "cache_boolean_keep_mask_style": {
        "blind": True,
        "style": "concatenate the chunk, then evict with a boolean mask over a positions tensor",
        "replace": {"SlidingWindowCache": '''
class SlidingWindowCache:
    def __init__(self, window, n_sinks=0):
        self.window = window
        self.n_sinks = n_sinks
        self.n_seen = 0
        self._k = self._v = self._pos = None

    def append(self, k, v):
        t = k.shape[2]
        new_pos = torch.arange(self.n_seen, self.n_seen + t, device=k.device)
        if self._k is None:
            self._k, self._v, self._pos = k, v, new_pos
        else:
            self._k = torch.cat([self._k, k], dim=2)
            self._v = torch.cat([self._v, v], dim=2)
            self._pos = torch.cat([self._pos, new_pos])
        self.n_seen += t
        keep = (self._pos < self.n_sinks) | (self._pos >= self.n_seen - self.window)
        if not bool(keep.all()):
            self._k = self._k[:, :, keep]
            self._v = self._v[:, :, keep]
            self._pos = self._pos[keep]

    def keys(self):
        return self._k

    def values(self):
        return self._v

    def positions(self):
        return self._pos.long()
'''},
        "must_fail": [],
    },
    "cache_token_list_style": {
        "blind": True,
        "style": "a Python list of (position, key, value) per token, filtered after each append, stacked on demand",
        "replace": {"SlidingWindowCache": '''
class SlidingWindowCache:
    def __init__(self, window, n_sinks=0):
        self.window = window
        self.n_sinks = n_sinks
        self.entries = []                    # (position, key (B, H, Dh), value (B, H, Dv)), increasing position
        self.n_seen = 0

    def append(self, k, v):
        for kt, vt in zip(k.unbind(dim=2), v.unbind(dim=2)):
            self.entries.append((self.n_seen, kt, vt))
            self.n_seen += 1
        oldest_in_window = self.n_seen - self.window
        self.entries = [e for e in self.entries if e[0] < self.n_sinks or e[0] >= oldest_in_window]

    def keys(self):
        return torch.stack([e[1] for e in self.entries], dim=2)

    def values(self):
        return torch.stack([e[2] for e in self.entries], dim=2)

    def positions(self):
        return torch.tensor([e[0] for e in self.entries], dtype=torch.long, device=self.entries[0][1].device)
'''},
        "must_fail": [],
    },
    "quantize_float32_division_style": {
        "blind": True,
        "style": "scale in x's dtype, the division done in float32 against that scale, torch.where for zero vectors; "
                 "dequantize by multiplying in float32 and casting back",
        "replace": {"quantize_kv": '''
def quantize_kv(x, dim=-1):
    scale = x.abs().amax(dim=dim, keepdim=True) / 127          # x's dtype
    divisor = torch.where(scale == 0, torch.ones_like(scale), scale).float()
    q = torch.round(x.float() / divisor).clamp(-127, 127).to(torch.int8)
    return q, scale
''', "dequantize_kv": '''
def dequantize_kv(q, scale):
    return (q.float() * scale.float()).to(scale.dtype)
'''},
        "must_fail": [],
    },
    "quantize_movedim_clamp_min_style": {
        "blind": True,
        "style": "the quantised axis moved last and back, a divisor clamped away from 0, codes through int16 first",
        "replace": {"quantize_kv": '''
def quantize_kv(x, dim=-1):
    xm = x.movedim(dim, -1)
    amax = xm.abs().max(dim=-1, keepdim=True).values
    scale = amax / 127.0
    safe = scale.clamp_min(torch.finfo(x.dtype).tiny)           # zero vectors: 0 / tiny = 0, no NaN
    codes = (xm / safe).round().clamp(min=-127, max=127).to(torch.int16).to(torch.int8)
    return codes.movedim(-1, dim), scale.movedim(-1, dim)
''', "dequantize_kv": '''
def dequantize_kv(q, scale):
    return scale * q.to(scale.dtype)
'''},
        "must_fail": [],
    },
    "quantize_inf_norm_nan_to_num_style": {
        "blind": True,
        "style": "scale from the infinity norm (torch.linalg.vector_norm), masked_fill of the zero scales before "
                 "dividing, dequantize with torch.mul",
        "replace": {"quantize_kv": '''
def quantize_kv(x, dim=-1):
    scale = torch.linalg.vector_norm(x, ord=float("inf"), dim=dim, keepdim=True) / 127
    zero = scale == 0
    q = torch.round(x / scale.masked_fill(zero, 1.0))
    q = torch.clamp(q, -127, 127).to(torch.int8)
    return q, scale.to(x.dtype)
''', "dequantize_kv": '''
def dequantize_kv(q, scale):
    return torch.mul(q, scale).to(scale.dtype)
'''},
        "must_fail": [],
    },
    "speculative_vectorised_acceptance_style": {
        "blind": True,
        "style": "all uniforms of a round drawn at once, acceptance as u * q < p, the first rejection found with argmax, "
                 "float64 probabilities",
        "replace": {"speculative_generate": '''
def speculative_generate(target, draft, idx, max_new_tokens, k=4, temperature=1.0, generator=None):
    ids = idx
    T_end = idx.shape[1] + max_new_tokens
    accepted = 0
    while ids.shape[1] < T_end:
        n = min(k, T_end - ids.shape[1])
        proposals, qs = [], []
        ctx = ids
        for _ in range(n):
            qd = torch.softmax(draft(ctx)[0, -1].double() / temperature, dim=-1)
            x = torch.multinomial(qd, 1, generator=generator)
            proposals.append(int(x))
            qs.append(qd)
            ctx = torch.cat([ctx, x.view(1, 1).to(ids.dtype)], dim=1)
        logits = target(ctx)[0, ids.shape[1] - 1:].double() / temperature       # (n + 1, V)
        ps = torch.softmax(logits, dim=-1)
        qs = torch.stack(qs)                                                      # (n, V)
        xs = torch.tensor(proposals, device=ps.device)
        p_x = ps[torch.arange(n), xs]
        q_x = qs[torch.arange(n), xs]
        u = torch.rand(n, generator=generator, dtype=torch.float64, device=ps.device)
        ok = u * q_x < p_x                                                          # u < p / q, no division
        n_ok = n if bool(ok.all()) else int((~ok).long().argmax())
        new = proposals[:n_ok]
        accepted += n_ok
        if n_ok < n:
            residual = (ps[n_ok] - qs[n_ok]).clamp_min(0)
            if float(residual.sum()) <= 0:
                residual = ps[n_ok]
            new.append(int(torch.multinomial(residual / residual.sum(), 1, generator=generator)))
        elif ids.shape[1] + n < T_end:
            new.append(int(torch.multinomial(ps[n], 1, generator=generator)))
        ids = torch.cat([ids, torch.tensor([new], dtype=ids.dtype, device=ids.device)], dim=1)
    return ids, accepted
'''},
        "must_fail": [],
    },
    "speculative_inverse_cdf_style": {
        "blind": True,
        "style": "every draw by inverse CDF (torch.rand + searchsorted on a cumulative sum), min(1, p/q) with clamp, "
                 "a Python list of token ids",
        "replace": {"speculative_generate": '''
def _draw(probs, generator):
    cdf = torch.cumsum(probs, dim=-1)
    u = torch.rand(1, generator=generator, dtype=cdf.dtype, device=cdf.device) * cdf[-1]
    return min(int(torch.searchsorted(cdf, u, right=True)), probs.shape[-1] - 1)


def speculative_generate(target, draft, idx, max_new_tokens, k=4, temperature=1.0, generator=None):
    tokens = idx[0].tolist()
    goal = len(tokens) + max_new_tokens
    accepted = 0

    def as_ids(seq):
        return torch.tensor([seq], dtype=idx.dtype, device=idx.device)

    while len(tokens) < goal:
        n = min(k, goal - len(tokens))
        drafted, q_list = [], []
        for _ in range(n):
            q = torch.softmax(draft(as_ids(tokens + drafted))[0, -1] / temperature, dim=-1)
            q_list.append(q)
            drafted.append(_draw(q, generator))
        p_all = torch.softmax(target(as_ids(tokens + drafted))[0] / temperature, dim=-1)   # (len, V)
        start = len(tokens) - 1                                   # logits at t score the token at t + 1
        rejected = False
        for i, x in enumerate(drafted):
            p, q = p_all[start + i], q_list[i]
            keep_prob = torch.clamp(p[x] / q[x], max=1.0)
            u = torch.rand(1, generator=generator, device=p.device)
            if u < keep_prob:
                tokens.append(x)
                accepted += 1
            else:
                residual = torch.clamp(p - q, min=0.0)
                tokens.append(_draw(residual / residual.sum() if residual.sum() > 0 else p, generator))
                rejected = True
                break
        if not rejected and len(tokens) < goal:
            tokens.append(_draw(p_all[start + n], generator))
    return as_ids(tokens), accepted
'''},
        "must_fail": [],
    },
    "speculative_gumbel_log_space_style": {
        "blind": True,
        "style": "draft and residual draws by the Gumbel-max trick, the acceptance test in log space "
                 "(log u < log p - log q), tokens written into a preallocated tensor",
        "replace": {"speculative_generate": '''
def _gumbel_sample(log_probs, generator):
    u = torch.rand(log_probs.shape, generator=generator, device=log_probs.device).clamp(1e-20, 1.0 - 1e-7)
    return int(torch.argmax(log_probs - torch.log(-torch.log(u))))


def speculative_generate(target, draft, idx, max_new_tokens, k=4, temperature=1.0, generator=None):
    T0 = idx.shape[1]
    out = torch.zeros(1, T0 + max_new_tokens, dtype=idx.dtype, device=idx.device)
    out[:, :T0] = idx
    filled, accepted = T0, 0
    while filled < T0 + max_new_tokens:
        n = min(k, T0 + max_new_tokens - filled)
        work = out[:, :filled].clone()
        log_qs = []
        for _ in range(n):
            log_q = torch.log_softmax(draft(work)[:, -1] / temperature, dim=-1)[0]
            x = _gumbel_sample(log_q, generator)
            log_qs.append(log_q)
            work = torch.cat([work, torch.full((1, 1), x, dtype=idx.dtype, device=idx.device)], dim=1)
        log_p = torch.log_softmax(target(work)[0, filled - 1:] / temperature, dim=-1)     # (n + 1, V)
        i = 0
        while i < n:
            x = int(work[0, filled + i])
            log_u = torch.log(torch.rand((), generator=generator, device=log_p.device))
            if log_u < log_p[i, x] - log_qs[i][x]:
                i += 1
                continue
            break
        out[0, filled:filled + i] = work[0, filled:filled + i]
        accepted += i
        filled += i
        if i < n:
            residual = (log_p[i].exp() - log_qs[i].exp()).clamp_min(0.0)
            if float(residual.sum()) <= 0.0:
                residual = log_p[i].exp()
            out[0, filled] = _gumbel_sample(torch.log(residual / residual.sum()), generator)
            filled += 1
        elif filled < T0 + max_new_tokens:
            out[0, filled] = _gumbel_sample(log_p[n], generator)
            filled += 1
    return out, accepted
'''},
        "must_fail": [],
    },
    "linear_einsum_tril_and_loop_einsum_style": {
        "blind": True,
        "style": "parallel: the (T, T) matrix by einsum, multiplied by a tril of ones; recurrent: a loop of einsum "
                 "outer products, outputs written into a preallocated tensor",
        "replace": {"linear_attention": '''
def linear_attention(q, k, v, causal=True):
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    a = torch.einsum("...id,...jd->...ij", fq, fk)                   # (..., T, T)
    if causal:
        T = q.shape[-2]
        a = a * torch.ones(T, T, dtype=a.dtype, device=a.device).tril()
    return torch.einsum("...ij,...je->...ie", a, v) / a.sum(dim=-1, keepdim=True)
''', "linear_attention_recurrent": '''
def linear_attention_recurrent(q, k, v, state=None, return_state=False):
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    *lead, T, Dh = q.shape
    Dv = v.shape[-1]
    if state is None:
        S = torch.zeros(*lead, Dh, Dv, dtype=q.dtype, device=q.device)
        z = torch.zeros(*lead, Dh, dtype=q.dtype, device=q.device)
    else:
        S, z = state
    out = torch.empty(*lead, T, Dv, dtype=v.dtype, device=v.device)
    for t in range(T):
        S = S + torch.einsum("...d,...e->...de", fk[..., t, :], v[..., t, :])
        z = z + fk[..., t, :]
        num = torch.einsum("...d,...de->...e", fq[..., t, :], S)
        den = torch.einsum("...d,...d->...", fq[..., t, :], z)
        out[..., t, :] = num / den[..., None]
    return (out, (S, z)) if return_state else out
'''},
        "must_fail": [],
    },
    "linear_cumsum_and_flattened_loop_style": {
        "blind": True,
        "style": "parallel: cumulative sums of phi(k) v^T and phi(k) (no T x T matrix); recurrent: leading axes "
                 "flattened into one, torch.bmm / baddbmm updates, outputs stacked from a list",
        "replace": {"linear_attention": '''
def linear_attention(q, k, v, causal=True):
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    kv = fk.unsqueeze(-1) * v.unsqueeze(-2)                        # (..., T, Dh, Dv)
    if causal:
        S = kv.cumsum(dim=-3)
        z = fk.cumsum(dim=-2)                                       # (..., T, Dh)
        num = (fq.unsqueeze(-1) * S).sum(dim=-2)                    # (..., T, Dv)
        den = (fq * z).sum(dim=-1, keepdim=True)
    else:
        S = kv.sum(dim=-3)                                          # (..., Dh, Dv)
        z = fk.sum(dim=-2)                                          # (..., Dh)
        num = fq @ S
        den = fq @ z.unsqueeze(-1)
    return num / den
''', "linear_attention_recurrent": '''
def linear_attention_recurrent(q, k, v, state=None, return_state=False):
    lead = q.shape[:-2]
    T, Dh, Dv = q.shape[-2], q.shape[-1], v.shape[-1]
    fq = (F.elu(q) + 1).reshape(-1, T, Dh)
    fk = (F.elu(k) + 1).reshape(-1, T, Dh)
    vv = v.reshape(-1, T, Dv)
    N = fq.shape[0]
    if state is None:
        S = fq.new_zeros(N, Dh, Dv)
        z = fq.new_zeros(N, Dh)
    else:
        S = state[0].reshape(N, Dh, Dv)
        z = state[1].reshape(N, Dh)
    outs = []
    for t in range(T):
        S = torch.baddbmm(S, fk[:, t, :, None], vv[:, t, None, :])   # S + phi(k_t) v_t^T
        z = z + fk[:, t]
        num = torch.bmm(fq[:, t, None, :], S)[:, 0]                   # (N, Dv)
        den = (fq[:, t] * z).sum(-1, keepdim=True)
        outs.append(num / den)
    out = torch.stack(outs, dim=1).reshape(*lead, T, Dv)
    if return_state:
        return out, (S.reshape(*lead, Dh, Dv), z.reshape(*lead, Dh))
    return out
'''},
        "must_fail": [],
    },
    "linear_float64_masked_fill_and_addcmul_style": {
        "blind": True,
        "style": "parallel: float64 scores, masked_fill of the future, row-normalised weights then matmul, cast back; "
                 "recurrent: torch.addcmul state updates, the divide with keepdim, torch.cat of the outputs",
        "replace": {"linear_attention": '''
def linear_attention(q, k, v, causal=True):
    fq = F.elu(q.double()) + 1
    fk = F.elu(k.double()) + 1
    sims = fq @ fk.transpose(-2, -1)                                 # (..., T, T)
    if causal:
        T = q.shape[-2]
        future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=q.device), diagonal=1)
        sims = sims.masked_fill(future, 0.0)
    weights = sims / sims.sum(dim=-1, keepdim=True)
    return (weights @ v.double()).to(v.dtype)
''', "linear_attention_recurrent": '''
def linear_attention_recurrent(q, k, v, state=None, return_state=False):
    phi_q = F.elu(q) + 1
    phi_k = F.elu(k) + 1
    if state is None:
        S = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype, device=q.device)
        z = torch.zeros(*q.shape[:-1][:-1], q.shape[-1], dtype=q.dtype, device=q.device)
    else:
        S, z = state[0].clone(), state[1].clone()
    pieces = []
    for t in range(q.shape[-2]):
        kt = phi_k[..., t:t + 1, :]                                  # (..., 1, Dh)
        S = torch.addcmul(S, kt.transpose(-2, -1), v[..., t:t + 1, :])   # (..., Dh, 1) * (..., 1, Dv)
        z = z + kt[..., 0, :]
        qt = phi_q[..., t:t + 1, :]                                  # (..., 1, Dh)
        pieces.append((qt @ S) / (qt * z[..., None, :]).sum(-1, keepdim=True))
    out = torch.cat(pieces, dim=-2)
    if return_state:
        return out, (S, z)
    return out
'''},
        "must_fail": [],
    },
}


# -- correct styles from a careful grader's audit (who read the hidden tests: not blind) --------------------------
# Each replaces the named cells of the reference; graded at full marks on seeds 0-2 (course grade).
VARIANTS.update({
    "audit_ring_buffer_planted": {
        "blind": False,
        "style": ('---------------------------------------------------------------- correct alternatives the planted '
                  'ring buffer (tests/planted/15_serving.py RING_BUFFER), alone: positions in ring order'),
        "replace": {
            'SlidingWindowCache': '''
class SlidingWindowCache:
    """A ring buffer of `window` slots written at n_seen % window, and the sinks apart (in ring order)."""

    def __init__(self, window, n_sinks=0):
        self.window = window
        self.n_sinks = n_sinks
        self.sink_k = self.sink_v = None
        self.ring_k = self.ring_v = None
        self.ring_pos = torch.full((window,), -1, dtype=torch.long)
        self.n_seen = 0

    def append(self, k, v):
        for i in range(k.shape[2]):
            kt, vt = k[:, :, i:i + 1], v[:, :, i:i + 1]
            p = self.n_seen
            self.n_seen += 1
            if p < self.n_sinks:
                self.sink_k = kt if self.sink_k is None else torch.cat([self.sink_k, kt], dim=2)
                self.sink_v = vt if self.sink_v is None else torch.cat([self.sink_v, vt], dim=2)
            if self.ring_k is None:
                B, H, _, Dh = k.shape
                self.ring_k = k.new_zeros(B, H, self.window, Dh)
                self.ring_v = v.new_zeros(B, H, self.window, v.shape[-1])
            slot = p % self.window
            self.ring_k[:, :, slot] = kt[:, :, 0]
            self.ring_v[:, :, slot] = vt[:, :, 0]
            self.ring_pos[slot] = p

    def _live(self):
        # ring slots in use that are not also sinks (a sink still in the window is kept once)
        return (self.ring_pos >= self.n_sinks).nonzero().flatten()

    def keys(self):
        live = self._live()
        parts = ([] if self.sink_k is None else [self.sink_k]) + [self.ring_k[:, :, live]]
        return torch.cat(parts, dim=2)

    def values(self):
        live = self._live()
        parts = ([] if self.sink_v is None else [self.sink_v]) + [self.ring_v[:, :, live]]
        return torch.cat(parts, dim=2)

    def positions(self):
        n_s = min(self.n_sinks, self.n_seen)
        return torch.cat([torch.arange(n_s), self.ring_pos[self._live()]])
''',
        },
        "must_fail": [],
    },
    "audit_ring_buffer_slot_order": {
        "blind": False,
        "style": ('a ring buffer whose entries are returned in slot order, chunk writes vectorised'),
        "replace": {
            'SlidingWindowCache': '''
class SlidingWindowCache:
    """Sinks in a list; the window in fixed tensors of `window` slots written at position % window."""

    def __init__(self, window, n_sinks=0):
        self.window = window
        self.n_sinks = n_sinks
        self.sinks = []                                   # (key, value) of positions 0 .. n_sinks - 1
        self.rk = self.rv = None
        self.rpos = torch.full((window,), -1, dtype=torch.long)
        self.n_seen = 0

    def append(self, k, v):
        t = k.shape[2]
        pos = torch.arange(self.n_seen, self.n_seen + t)
        self.n_seen += t
        for i in range(t):
            if int(pos[i]) < self.n_sinks:
                self.sinks.append((k[:, :, i:i + 1], v[:, :, i:i + 1]))
        if self.rk is None:
            self.rk = k.new_zeros(*k.shape[:2], self.window, k.shape[3])
            self.rv = v.new_zeros(*v.shape[:2], self.window, v.shape[3])
        last = slice(max(0, t - self.window), t)          # only the last `window` of the chunk can stay
        slots = pos[last] % self.window
        self.rk[:, :, slots] = k[:, :, last]
        self.rv[:, :, slots] = v[:, :, last]
        self.rpos[slots] = pos[last]

    def _ring(self):
        return ((self.rpos >= 0) & (self.rpos >= self.n_sinks)).nonzero().flatten()

    def keys(self):
        return torch.cat([s[0] for s in self.sinks] + [self.rk[:, :, self._ring()]], dim=2)

    def values(self):
        return torch.cat([s[1] for s in self.sinks] + [self.rv[:, :, self._ring()]], dim=2)

    def positions(self):
        return torch.cat([torch.arange(len(self.sinks)), self.rpos[self._ring()]])
''',
        },
        "must_fail": [],
    },
    "audit_quant_clamp_eps": {
        "blind": False,
        "style": ('scale clamped away from zero instead of a guarded division'),
        "replace": {
            'quantize_kv': '''
def quantize_kv(x, dim=-1):
    amax = x.abs().amax(dim=dim, keepdim=True)
    scale = amax / 127
    q = (x / scale.clamp(min=torch.finfo(x.dtype).tiny)).round().clamp(-127, 127).to(torch.int8)
    return q, scale
''',
        },
        "must_fail": [],
    },
    "audit_quant_float64": {
        "blind": False,
        "style": ("quantisation computed in float64, the scale handed back in x's dtype"),
        "replace": {
            'quantize_kv': '''
def quantize_kv(x, dim=-1):
    xd = x.double()
    scale = xd.abs().amax(dim=dim, keepdim=True) / 127
    q = torch.where(scale > 0, xd / torch.where(scale > 0, scale, 1.0), 0.0).round().clamp(-127, 127).to(torch.int8)
    return q, scale.to(x.dtype)
''',
            'dequantize_kv': '''
def dequantize_kv(q, scale):
    return (q.double() * scale.double()).to(scale.dtype)
''',
        },
        "must_fail": [],
    },
    "audit_spec_ratio_without_min": {
        "blind": False,
        "style": ('accept with u < p/q (no min: u < 1 anyway), residual left unnormalised (multinomial normalises)'),
        "replace": {
            'speculative_generate': '''
def speculative_generate(target, draft, idx, max_new_tokens, k=4, temperature=1.0, generator=None):
    """Sample from ``target`` with proposals from ``draft``: the tokens follow the target's own distribution exactly.

    Each round the draft proposes n = min(k, tokens still to write) tokens one at a time (from
    q = softmax(draft logits / temperature)); ONE target pass scores them all and gives the distribution of
    the token after them (p = softmax(target logits / temperature), n + 1 rows, the logits at position t
    scoring the token at t + 1): one target call per round; proposal x is kept with probability
    min(1, p(x) / q(x)), in order; at the first rejection the token is drawn from
    normalise(max(0, p - q)) and the round ends; if all n were kept and tokens remain, one more is drawn
    from the target's distribution after them.

    Args:
        target, draft: models mapping ids (1, T) to logits (1, T, V).
        idx: (1, T0) the prompt.
        max_new_tokens: how many tokens to add.
        k: how many tokens the draft proposes per round (at most).
        temperature: > 0; divides the logits of both models.
        generator: the torch.Generator of every random draw.

    Returns:
        (tokens, accepted): tokens (1, T0 + max_new_tokens) LongTensor, the prompt followed by the new
        tokens; accepted an int, how many of the new tokens are kept draft proposals.
    """
    accepted = 0
    end = idx.shape[1] + max_new_tokens
    while idx.shape[1] < end:
        T0 = idx.shape[1]
        n = min(k, end - T0)
        ids, qs = idx, []
        for _ in range(n):                                             # 1. the draft proposes, one token at a time
            q = torch.softmax(draft(ids)[0, -1] / temperature, dim=-1)             # (V,)
            x = torch.multinomial(q, 1, generator=generator)                        # (1,)
            ids = torch.cat([ids, x[None]], dim=1)
            qs.append(q)
        # 2. one target pass: logits at T0 - 1 + i score proposal i; the last row scores the token after them
        p = torch.softmax(target(ids)[0, T0 - 1:] / temperature, dim=-1)           # (n + 1, V)
        for i in range(n):                                             # 3. accept or resample, in order
            x = ids[0, T0 + i]
            if torch.rand((), generator=generator) < p[i, x] / qs[i][x]:
                idx = ids[:, :T0 + i + 1]
                accepted += 1
                continue
            residual = torch.clamp(p[i] - qs[i], min=0.0)
            y = torch.multinomial(residual, 1, generator=generator)
            idx = torch.cat([ids[:, :T0 + i], y[None]], dim=1)
            break
        else:                                                          # 4. all kept: a free token from p_{n+1}
            if idx.shape[1] < end:
                y = torch.multinomial(p[n], 1, generator=generator)
                idx = torch.cat([idx, y[None]], dim=1)
    return idx, accepted
''',
        },
        "must_fail": [],
    },
    "audit_spec_log_space": {
        "blind": False,
        "style": ('the test in log space: log u < log p - log q'),
        "replace": {
            'speculative_generate': '''
def speculative_generate(target, draft, idx, max_new_tokens, k=4, temperature=1.0, generator=None):
    """Sample from ``target`` with proposals from ``draft``: the tokens follow the target's own distribution exactly.

    Each round the draft proposes n = min(k, tokens still to write) tokens one at a time (from
    q = softmax(draft logits / temperature)); ONE target pass scores them all and gives the distribution of
    the token after them (p = softmax(target logits / temperature), n + 1 rows, the logits at position t
    scoring the token at t + 1): one target call per round; proposal x is kept with probability
    min(1, p(x) / q(x)), in order; at the first rejection the token is drawn from
    normalise(max(0, p - q)) and the round ends; if all n were kept and tokens remain, one more is drawn
    from the target's distribution after them.

    Args:
        target, draft: models mapping ids (1, T) to logits (1, T, V).
        idx: (1, T0) the prompt.
        max_new_tokens: how many tokens to add.
        k: how many tokens the draft proposes per round (at most).
        temperature: > 0; divides the logits of both models.
        generator: the torch.Generator of every random draw.

    Returns:
        (tokens, accepted): tokens (1, T0 + max_new_tokens) LongTensor, the prompt followed by the new
        tokens; accepted an int, how many of the new tokens are kept draft proposals.
    """
    accepted = 0
    end = idx.shape[1] + max_new_tokens
    while idx.shape[1] < end:
        T0 = idx.shape[1]
        n = min(k, end - T0)
        ids, qs = idx, []
        for _ in range(n):                                             # 1. the draft proposes, one token at a time
            q = torch.softmax(draft(ids)[0, -1] / temperature, dim=-1)             # (V,)
            x = torch.multinomial(q, 1, generator=generator)                        # (1,)
            ids = torch.cat([ids, x[None]], dim=1)
            qs.append(q)
        # 2. one target pass: logits at T0 - 1 + i score proposal i; the last row scores the token after them
        p = torch.softmax(target(ids)[0, T0 - 1:] / temperature, dim=-1)           # (n + 1, V)
        for i in range(n):                                             # 3. accept or resample, in order
            x = ids[0, T0 + i]
            if torch.log(torch.rand((), generator=generator)) < torch.log(p[i, x]) - torch.log(qs[i][x]):
                idx = ids[:, :T0 + i + 1]
                accepted += 1
                continue
            residual = torch.clamp(p[i] - qs[i], min=0.0)
            y = torch.multinomial(residual / residual.sum(), 1, generator=generator)
            idx = torch.cat([ids[:, :T0 + i], y[None]], dim=1)
            break
        else:                                                          # 4. all kept: a free token from p_{n+1}
            if idx.shape[1] < end:
                y = torch.multinomial(p[n], 1, generator=generator)
                idx = torch.cat([idx, y[None]], dim=1)
    return idx, accepted
''',
        },
        "must_fail": [],
    },
    "audit_linear_float64": {
        "blind": False,
        "style": ('linear attention in float64, both forms, cast back; the causal mask by masked_fill'),
        "replace": {
            'linear_attention': '''
def linear_attention(q, k, v, causal=True):
    fq, fk, vd = F.elu(q.double()) + 1, F.elu(k.double()) + 1, v.double()
    sim = torch.einsum("...id,...jd->...ij", fq, fk)
    if causal:
        T = q.shape[-2]
        sim = sim.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), 0.0)
    return (torch.einsum("...ij,...je->...ie", sim, vd) / sim.sum(-1, keepdim=True)).to(v.dtype)
''',
            'linear_attention_recurrent': '''
def linear_attention_recurrent(q, k, v, state=None, return_state=False):
    fq, fk = F.elu(q.double()) + 1, F.elu(k.double()) + 1
    if state is None:
        S = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=torch.float64)
        z = torch.zeros(*q.shape[:-2], q.shape[-1], dtype=torch.float64)
    else:
        S, z = state[0].double(), state[1].double()
    outs = []
    for t in range(q.shape[-2]):
        S = S + torch.einsum("...d,...e->...de", fk[..., t, :], v[..., t, :].double())
        z = z + fk[..., t, :]
        outs.append(torch.einsum("...d,...de->...e", fq[..., t, :], S) / (fq[..., t, :] * z).sum(-1, keepdim=True))
    out = torch.stack(outs, -2).to(v.dtype)
    return (out, (S.to(v.dtype), z.to(v.dtype))) if return_state else out
''',
        },
        "must_fail": [],
    },
})
