"""Planted bugs and correct alternative styles for lesson 00 (see CONTRIBUTING.md)."""

LESSON = "00_softmax_lookup"

VARIANTS = {
    "softmax_no_max_subtraction": {
        "replace": {"softmax": """
            def softmax(x, dim=-1):
                e = x.exp()
                return e / e.sum(dim=dim, keepdim=True)
        """},
        "must_fail": ["test_softmax_stable"],
    },
    "softmax_wrong_axis": {
        "replace": {"softmax": """
            def softmax(x, dim=-1):
                shifted = x - x.amax(dim=0, keepdim=True)
                e = shifted.exp()
                return e / e.sum(dim=0, keepdim=True)
        """},
        "must_fail": ["test_softmax_dim"],
    },
    "softmax_max_clamped_at_zero": {
        # the shift starts from 0 instead of the row's maximum: large scores are fine, very negative ones
        # (every exp underflows to 0) give 0/0
        "replace": {"softmax": """
            def softmax(x, dim=-1):
                e = (x - x.amax(dim=dim, keepdim=True).clamp(min=0)).exp()
                return e / e.sum(dim=dim, keepdim=True)
        """},
        "must_fail": ["test_softmax_stable"],
    },
    "lookup_exp_without_shift": {
        # soft_lookup normalises exp(scores) itself instead of calling the stable softmax
        "replace": {"soft_lookup": """
            def soft_lookup(query, keys, values, temperature=1.0):
                e = (keys @ query / temperature).exp()
                weights = e / e.sum()
                return weights @ values, weights
        """},
        "must_fail": ["test_soft_lookup_set"],
    },
    "temperature_multiplies": {
        "replace": {"soft_lookup": """
            def soft_lookup(query, keys, values, temperature=1.0):
                weights = softmax(keys @ query * temperature, dim=-1)
                return weights @ values, weights
        """},
        "must_fail": ["test_soft_lookup_temperature"],
    },
    "lookup_returns_keys": {
        "replace": {"soft_lookup": """
            def soft_lookup(query, keys, values, temperature=1.0):
                weights = softmax(keys @ query / temperature, dim=-1)
                return weights @ keys, weights
        """},
        "must_fail": ["test_soft_lookup_values"],
    },
    # Forbidden shortcuts: the exercise says "without calling torch.softmax"; every softmax test must catch them.
    "softmax_calls_torch_softmax": {
        "replace": {"softmax": """
            import torch
            def softmax(x, dim=-1):
                return torch.softmax(x, dim=dim)
        """},
        "must_fail": ["test_softmax_basic", "test_softmax_stable", "test_softmax_dim", "test_softmax_properties"],
    },
    "softmax_calls_F_softmax": {
        "replace": {"softmax": """
            import torch.nn.functional as F
            def softmax(x, dim=-1):
                return F.softmax(x, dim=dim)
        """},
        "must_fail": ["test_softmax_basic", "test_softmax_stable", "test_softmax_dim", "test_softmax_properties"],
    },
    "softmax_tensor_method": {
        "replace": {"softmax": """
            def softmax(x, dim=-1):
                return x.softmax(dim)
        """},
        "must_fail": ["test_softmax_basic", "test_softmax_stable", "test_softmax_dim", "test_softmax_properties"],
    },
    "softmax_log_softmax_exp": {
        "replace": {"softmax": """
            def softmax(x, dim=-1):
                return x.log_softmax(dim=dim).exp()
        """},
        "must_fail": ["test_softmax_basic", "test_softmax_stable", "test_softmax_dim", "test_softmax_properties"],
    },
    "lookup_calls_torch_softmax": {
        "replace": {"soft_lookup": """
            import torch
            def soft_lookup(query, keys, values, temperature=1.0):
                weights = torch.softmax(keys @ query / temperature, dim=-1)
                return weights @ values, weights
        """},
        "must_fail": ["test_soft_lookup_shapes", "test_soft_lookup_values", "test_soft_lookup_temperature",
                      "test_soft_lookup_set"],
    },
    # Correct solutions written another way: they must keep full marks.
    "loop_and_logsumexp_style": {
        "replace": {
            "softmax": """
                import torch
                def softmax(x, dim=-1):
                    # log-sum-exp form: exp(x - logsumexp(x)), stable for the same reason
                    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))
            """,
            "soft_lookup": """
                import torch
                def soft_lookup(query, keys, values, temperature=1.0):
                    scores = torch.stack([torch.dot(k, query) for k in keys]) / temperature
                    w = softmax(scores)
                    out = torch.zeros(values.shape[1], dtype=values.dtype)
                    for wi, vi in zip(w, values):
                        out = out + wi * vi
                    return out, w
            """,
        },
        "must_fail": [],
    },
    "einsum_style": {
        "replace": {"soft_lookup": """
            import torch
            def soft_lookup(query, keys, values, temperature=1.0):
                w = softmax(torch.einsum("nd,d->n", keys, query) / temperature)
                return torch.einsum("n,nv->v", w, values), w
        """},
        "must_fail": [],
    },
    "softmax_loop_over_rows": {
        "replace": {"softmax": """
            import torch
            def softmax(x, dim=-1):
                # move `dim` last, then one row at a time
                moved = x.movedim(dim, -1)
                rows = []
                for row in moved.reshape(-1, moved.shape[-1]):
                    e = torch.exp(row - row.max())
                    rows.append(e / e.sum())
                return torch.stack(rows).reshape(moved.shape).movedim(-1, dim)
        """},
        "must_fail": [],
    },
}
