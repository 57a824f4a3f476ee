"""Planted-bug submissions and correct alternative styles for lesson 04 (multi-hop attention).

Each variant replaces whole solution cells (by grade_id) of the reference solution; ``must_fail``
lists the test cells (by grade_id) that must lose points. An empty ``must_fail`` marks a correct
solution in another style, which must keep full marks.
"""

import textwrap

LESSON = "04_multi_hop_attention"

# The class head every variant shares: __init__ is given to the learner, outside the solution.
_HEAD = '''
class MemoryHop(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.d_model = d_model
        self.H = nn.Linear(d_model, d_model, bias=False)

    def forward(self, controller, memory_keys, memory_values, mask):
'''


def _hop(body: str) -> str:
    """A whole MemoryHop cell whose forward has the given body (indented by 8 spaces)."""
    lines = [("        " + line) if line.strip() else "" for line in textwrap.dedent(body).strip("\n").splitlines()]
    return _HEAD.strip("\n") + "\n" + "\n".join(lines) + "\n"


VARIANTS = {
    # ---------------------------------------------------------------- classic mistakes
    "hop_never_updates_controller": {
        # Attends and reads, then hands back the controller it was given: every hop asks the same question.
        "replace": {"MemoryHop": _hop('''
            scores = torch.einsum("bd,bnd->bn", controller, memory_keys)
            weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).masked_fill(~mask, 0.0)
            read = torch.einsum("bn,bnd->bd", weights, memory_values)
            return controller, weights
        ''')},
        "must_fail": ["test_memory_hop_controller_update", "test_memory_hop_worked_example"],
    },
    "hop_forgets_controller": {
        # new_controller = read: the question is lost after the first hop.
        "replace": {"MemoryHop": _hop('''
            scores = torch.einsum("bd,bnd->bn", controller, memory_keys)
            weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).masked_fill(~mask, 0.0)
            return torch.einsum("bn,bnd->bd", weights, memory_values), weights
        ''')},
        "must_fail": ["test_memory_hop_controller_update"],
    },
    "hop_ignores_mask": {
        "replace": {"MemoryHop": _hop('''
            weights = torch.softmax(torch.einsum("bd,bnd->bn", controller, memory_keys), dim=-1)
            return self.H(controller) + torch.einsum("bn,bnd->bd", weights, memory_values), weights
        ''')},
        "must_fail": ["test_memory_hop_padding"],
    },
    "hop_mask_after_softmax": {
        # Zeroes the padding after the softmax: the real weights no longer sum to 1.
        "replace": {"MemoryHop": _hop('''
            weights = torch.softmax(torch.einsum("bd,bnd->bn", controller, memory_keys), dim=-1) * mask
            return self.H(controller) + torch.einsum("bn,bnd->bd", weights, memory_values), weights
        ''')},
        "must_fail": ["test_memory_hop_padding"],
    },
    "hop_softmax_wrong_axis": {
        # Softmax over the batch (dim 0) instead of over the sentences.
        "replace": {"MemoryHop": _hop('''
            scores = torch.einsum("bd,bnd->bn", controller, memory_keys).masked_fill(~mask, float("-inf"))
            weights = torch.softmax(scores, dim=0).nan_to_num(0.0)
            return self.H(controller) + torch.einsum("bn,bnd->bd", weights, memory_values), weights
        ''')},
        "must_fail": ["test_memory_hop_weights"],
    },
    "hop_reads_keys": {
        # Reads the weighted sum of the keys instead of the values.
        "replace": {"MemoryHop": _hop('''
            scores = torch.einsum("bd,bnd->bn", controller, memory_keys)
            weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).masked_fill(~mask, 0.0)
            return self.H(controller) + torch.einsum("bn,bnd->bd", weights, memory_keys), weights
        ''')},
        "must_fail": ["test_memory_hop_controller_update", "test_memory_hop_worked_example"],
    },
    "hop_no_max_subtraction": {
        # A hand-written softmax without subtracting the maximum: exp(1000) = inf.
        "replace": {"MemoryHop": _hop('''
            scores = torch.einsum("bd,bnd->bn", controller, memory_keys)
            e = scores.exp() * mask
            weights = e / e.sum(dim=-1, keepdim=True).clamp(min=1e-30)
            return self.H(controller) + torch.einsum("bn,bnd->bd", weights, memory_values), weights
        ''')},
        "must_fail": ["test_memory_hop_stable"],
    },
    "hop_mask_finite_constant": {
        # Padding scores set to -1e4: real scores below -1e4 lose to the padding.
        "replace": {"MemoryHop": _hop('''
            scores = torch.einsum("bd,bnd->bn", controller, memory_keys).masked_fill(~mask, -1e4)
            weights = torch.softmax(scores, dim=-1)
            return self.H(controller) + torch.einsum("bn,bnd->bd", weights, memory_values), weights
        ''')},
        "must_fail": ["test_memory_hop_stable"],
    },
    "hop_nan_on_empty_story": {
        # -inf masking without fixing rows that have no real sentence: softmax gives NaN there.
        "replace": {"MemoryHop": _hop('''
            scores = torch.einsum("bd,bnd->bn", controller, memory_keys).masked_fill(~mask, float("-inf"))
            weights = torch.softmax(scores, dim=-1)
            return self.H(controller) + torch.einsum("bn,bnd->bd", weights, memory_values), weights
        ''')},
        "must_fail": ["test_memory_hop_empty_story"],
    },
    "hop_ignores_H": {
        # the documented controller map H is never used: q' = q + read
        "replace": {"MemoryHop": _hop('''
            scores = torch.einsum("bd,bnd->bn", controller, memory_keys).masked_fill(~mask, float("-inf"))
            weights = torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0)
            return controller + torch.einsum("bn,bnd->bd", weights, memory_values), weights
        ''')},
        "must_fail": ["test_memory_hop_controller_update", "test_memory_hop_worked_example"],
    },
    # ---------------------------------------------------------------- correct, in other styles
    "where_and_dtype_min_style": {
        # torch.where with the dtype's minimum, explicit F.linear with H's weight, zeroing empty rows
        # by multiplying with the mask.
        "replace": {"MemoryHop": _hop('''
            scores = torch.einsum("bnd,bd->bn", memory_keys, controller)
            scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)
            weights = torch.softmax(scores, dim=-1) * mask.to(scores.dtype)
            read = torch.einsum("bn,bnd->bd", weights, memory_values)
            return F.linear(controller, self.H.weight) + read, weights
        ''')},
        "must_fail": [],
    },
    "logsumexp_style": {
        # weights = exp(scores - logsumexp(scores)): sound, though off by ~1e-3 at scores of 3e4 in float32
        "replace": {"MemoryHop": _hop('''
            scores = (memory_keys * controller[:, None, :]).sum(-1).masked_fill(~mask, float("-inf"))
            lse = torch.logsumexp(scores, dim=-1, keepdim=True)
            lse = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)      # an empty story
            weights = torch.exp(scores - lse)
            return self.H(controller) + (weights[:, :, None] * memory_values).sum(1), weights
        ''')},
        "must_fail": [],
    },
    "loop_style": {
        # A loop over the sentence slots, a hand-written stable softmax, empty stories handled by hand.
        "replace": {"MemoryHop": _hop('''
            B, N, D = memory_keys.shape
            scores = []
            for i in range(N):
                s = (memory_keys[:, i, :] * controller).sum(dim=-1)           # (B,)
                scores.append(torch.where(mask[:, i], s, torch.full_like(s, float("-inf"))))
            scores = torch.stack(scores, dim=1)                                 # (B, N)
            top = scores.max(dim=1, keepdim=True).values
            top = torch.where(torch.isinf(top), torch.zeros_like(top), top)     # an empty story has max -inf
            e = torch.exp(scores - top)                                         # exp(-inf) = 0 on padding
            total = e.sum(dim=1, keepdim=True)
            weights = e / torch.where(total > 0, total, torch.ones_like(total))
            read = torch.zeros_like(controller)
            for i in range(N):
                read = read + weights[:, i:i + 1] * memory_values[:, i, :]
            return controller @ self.H.weight.T + read, weights
        ''')},
        "must_fail": [],
    },
}

# ---------------------------------------------------------------------------------------- issue 42
# Found by a second learner: masking with the dtype's minimum alone gives an empty story a uniform row (not
# the NaN the text spoke of); the message must say what to do about it.
VARIANTS.update({
    "hop_finfo_min_only": {
        "replace": {"MemoryHop": _hop('''
            scores = (memory_keys @ controller.unsqueeze(-1)).squeeze(-1)
            weights = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)
            return self.H(controller) + (weights.unsqueeze(1) @ memory_values).squeeze(1), weights
        ''')},
        "must_fail": ["test_memory_hop_empty_story"],
        "says": {"test_memory_hop_empty_story": ["uniform", "after the softmax"]},
    },
})
