"""Planted-bug submissions for lesson 01 (attention pooling), and correct alternative styles.

Each variant replaces whole solution cells (by grade_id) of the reference notebook. A bug lists the
test cells that must lose points; a correct alternative style has ``must_fail: []`` and must keep
full marks.
"""

LESSON = "01_attention_pooling"

# The constructor every AttentionPooling variant keeps (the tests set self.query).
_ATT_HEAD = '''class AttentionPooling(nn.Module):
    """Pool a sequence of vectors into one, weighting each by a learned relevance score."""

    def __init__(self, d_model):
        super().__init__()
        self.query = nn.Parameter(torch.randn(d_model) / d_model ** 0.5)

    def forward(self, x, mask):
'''


def _attention(body: str) -> str:
    """An AttentionPooling cell whose forward has ``body`` (indented by 8 spaces)."""
    lines = [("        " + line) if line.strip() else "" for line in body.strip("\n").splitlines()]
    return _ATT_HEAD + "\n".join(lines) + "\n"


VARIANTS = {
    # ------------------------------------------------------------------ mean_pooling bugs
    "mean_divides_by_T": {
        # Sums the real tokens correctly but divides by the padded length T.
        "replace": {"mean_pooling": '''def mean_pooling(x, mask):
    m = mask.unsqueeze(-1).to(x.dtype)
    return (x * m).sum(dim=1) / x.shape[1]
'''},
        "must_fail": ["test_mean_pooling_true_length"],
    },
    "mean_ignores_mask": {
        # Averages every position, padding included.
        "replace": {"mean_pooling": '''def mean_pooling(x, mask):
    return x.mean(dim=1)
'''},
        "must_fail": ["test_mean_pooling_true_length", "test_mean_pooling_padding_invariance"],
    },
    "mean_fully_padded_nan": {
        # Right for every tweet with a word, but 0 / 0 = NaN for a row with none.
        "replace": {"mean_pooling": '''def mean_pooling(x, mask):
    m = mask.unsqueeze(-1).to(x.dtype)
    return (x * m).sum(dim=1) / m.sum(dim=1)
'''},
        "must_fail": ["test_mean_pooling_fully_padded"],
    },
    # ------------------------------------------------------------------ AttentionPooling bugs
    "attention_ignores_mask": {
        # Softmax over all T positions: padding gets weight and pollutes the pooled vector.
        "replace": {"AttentionPooling": _attention('''
scores = x @ self.query
weights = torch.softmax(scores, dim=-1)
return torch.einsum("bt,btd->bd", weights, x), weights
''')},
        "must_fail": ["test_attention_pooling_padding_zero", "test_attention_pooling_padding_invariance"],
    },
    "attention_mask_after_softmax": {
        # Zeroes the padding weights after the softmax without renormalising: the real weights sum
        # to less than 1 and still depend on the padding through the denominator.
        "replace": {"AttentionPooling": _attention('''
scores = x @ self.query
weights = torch.softmax(scores, dim=-1) * mask
return torch.einsum("bt,btd->bd", weights, x), weights
''')},
        "must_fail": ["test_attention_pooling_weights_sum_to_one", "test_attention_pooling_padding_invariance"],
    },
    "attention_no_max_subtraction": {
        # A hand-written softmax without subtracting the maximum: exp(1000) = inf -> NaN.
        "replace": {"AttentionPooling": _attention('''
scores = x @ self.query
e = torch.exp(scores) * mask
total = e.sum(dim=-1, keepdim=True)
weights = torch.where(total > 0, e / total, torch.zeros_like(e))
return torch.einsum("bt,btd->bd", weights, x), weights
''')},
        "must_fail": ["test_attention_pooling_stable"],
    },
    "attention_fully_padded_nan": {
        # Masks with -inf and stops there: a row with no real token is softmax(all -inf) = NaN.
        "replace": {"AttentionPooling": _attention('''
scores = (x @ self.query).masked_fill(~mask, float("-inf"))
weights = torch.softmax(scores, dim=-1)
return torch.einsum("bt,btd->bd", weights, x), weights
''')},
        "must_fail": ["test_attention_pooling_fully_padded"],
    },
    "attention_softmax_over_batch": {
        # The softmax runs over the batch axis instead of the tokens.
        "replace": {"AttentionPooling": _attention('''
scores = (x @ self.query).masked_fill(~mask, torch.finfo(x.dtype).min)
weights = torch.softmax(scores, dim=0).masked_fill(~mask, 0.0)
return torch.einsum("bt,btd->bd", weights, x), weights
''')},
        "must_fail": ["test_attention_pooling_example", "test_attention_pooling_weights_sum_to_one"],
    },
    # ------------------------------------------------------------------ TweetClassifier bug
    "classifier_drops_mask": {
        # Pools every position of the batch rectangle: padding ids are read as words.
        "replace": {"TweetClassifier": '''class TweetClassifier(nn.Module):
    def __init__(self, vectors, pooling="attention", n_classes=2):
        super().__init__()
        d_model = vectors.shape[1]
        self.pooling = pooling
        self.embed = nn.Embedding.from_pretrained(vectors, freeze=True, padding_idx=0)
        self.pool = AttentionPooling(d_model) if pooling == "attention" else None
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, ids, mask):
        x = self.embed(ids)
        everything = torch.ones_like(mask)
        if self.pool is None:
            pooled = mean_pooling(x, everything)
            weights = everything.float() / everything.shape[1]
        else:
            pooled, weights = self.pool(x, everything)
        return self.head(pooled), weights
'''},
        "must_fail": ["test_tweet_classifier"],
    },
    "classifier_mask_from_ids": {
        # Rebuilds the mask from the ids (id 0 = padding) instead of using the one it is given.
        "replace": {"TweetClassifier": '''class TweetClassifier(nn.Module):
    def __init__(self, vectors, pooling="attention", n_classes=2):
        super().__init__()
        d_model = vectors.shape[1]
        self.pooling = pooling
        self.embed = nn.Embedding.from_pretrained(vectors, freeze=True, padding_idx=0)
        self.pool = AttentionPooling(d_model) if pooling == "attention" else None
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, ids, mask):
        x = self.embed(ids)
        real = ids != 0
        if self.pool is None:
            pooled = mean_pooling(x, real)
            weights = real.to(x.dtype) / real.sum(dim=-1, keepdim=True).clamp(min=1)
        else:
            pooled, weights = self.pool(x, real)
        return self.head(pooled), weights
'''},
        "must_fail": ["test_tweet_classifier"],
    },
    # ------------------------------------------------------------------ documented arguments ignored
    "classifier_ignores_n_classes": {
        "replace": {"TweetClassifier": 'class TweetClassifier(nn.Module):\n    def __init__(self, vectors, pooling="attention", n_classes=2):\n        super().__init__()\n        d_model = vectors.shape[1]\n        self.pooling = pooling\n        self.embed = nn.Embedding.from_pretrained(vectors, freeze=True, padding_idx=0)\n        self.pool = AttentionPooling(d_model) if pooling == "attention" else None\n        self.head = nn.Linear(d_model, 2)\n\n    def forward(self, ids, mask):\n        x = self.embed(ids)\n        if self.pool is None:\n            pooled = mean_pooling(x, mask)\n            weights = mask.to(x.dtype) / mask.sum(dim=-1, keepdim=True).clamp(min=1)\n        else:\n            pooled, weights = self.pool(x, mask)\n        return self.head(pooled), weights\n'},
        "must_fail": ["test_tweet_classifier"],
    },
    "classifier_trains_the_vectors": {
        "replace": {"TweetClassifier": 'class TweetClassifier(nn.Module):\n    def __init__(self, vectors, pooling="attention", n_classes=2):\n        super().__init__()\n        d_model = vectors.shape[1]\n        self.pooling = pooling\n        self.embed = nn.Embedding.from_pretrained(vectors, freeze=False, padding_idx=0)\n        self.pool = AttentionPooling(d_model) if pooling == "attention" else None\n        self.head = nn.Linear(d_model, n_classes)\n\n    def forward(self, ids, mask):\n        x = self.embed(ids)\n        if self.pool is None:\n            pooled = mean_pooling(x, mask)\n            weights = mask.to(x.dtype) / mask.sum(dim=-1, keepdim=True).clamp(min=1)\n        else:\n            pooled, weights = self.pool(x, mask)\n        return self.head(pooled), weights\n'},
        "must_fail": ["test_tweet_classifier"],
    },
    # ------------------------------------------------------------------ correct alternative styles
    "extra_score_bias_style": {
        # A learned bias added to every score before the softmax: the softmax cancels it, so it is
        # harmless (the exercise asks that the query be used, not that every parameter be).
        "replace": {"AttentionPooling": '''class AttentionPooling(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.query = nn.Parameter(torch.randn(d_model) / d_model ** 0.5)
        self.score_bias = nn.Parameter(torch.zeros(1))

    def forward(self, x, mask):
        scores = x @ self.query + self.score_bias
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0)
        return torch.einsum("bt,btd->bd", weights, x), weights
'''},
        "must_fail": [],
    },
    "loop_style": {
        # One tweet at a time, selecting the real tokens: slow but correct.
        "replace": {
            "mean_pooling": '''def mean_pooling(x, mask):
    B, T, D = x.shape
    out = x.new_zeros(B, D)
    for b in range(B):
        real = x[b][mask[b]]                 # (L, D)
        if real.shape[0] > 0:
            out[b] = real.mean(dim=0)
    return out
''',
            "AttentionPooling": _attention('''
B, T, D = x.shape
pooled = x.new_zeros(B, D)
weights = x.new_zeros(B, T)
for b in range(B):
    idx = mask[b].nonzero().flatten()      # positions of the real tokens
    if idx.numel() == 0:
        continue                           # nothing to attend to: zeros
    w = torch.softmax(x[b, idx] @ self.query, dim=0)
    weights[b, idx] = w
    pooled[b] = w @ x[b, idx]
return pooled, weights
'''),
        },
        "must_fail": [],
    },
    "where_einsum_style": {
        # torch.where with -inf, NaN of empty rows replaced afterwards, einsum everywhere.
        "replace": {
            "mean_pooling": '''def mean_pooling(x, mask):
    total = torch.einsum("btd,bt->bd", x, mask.to(x.dtype))
    return total / mask.sum(dim=-1, keepdim=True).clamp(min=1)
''',
            "AttentionPooling": _attention('''
scores = torch.einsum("btd,d->bt", x, self.query)
scores = torch.where(mask, scores, torch.full_like(scores, float("-inf")))
weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
pooled = torch.einsum("bt,btd->bd", weights, x)
return pooled, weights
'''),
        },
        "must_fail": [],
    },
    "large_negative_bmm_style": {
        # A large finite negative instead of -inf, weights re-masked, batched matmul; the
        # classifier writes mean pooling as uniform attention weights.
        "replace": {
            "mean_pooling": '''def mean_pooling(x, mask):
    m = mask.float()
    w = m / m.sum(dim=1, keepdim=True).clamp_min(1.0)      # (B, T)
    return torch.bmm(w.unsqueeze(1), x).squeeze(1)         # (B, 1, T) @ (B, T, D) -> (B, D)
''',
            "AttentionPooling": _attention('''
scores = torch.matmul(x, self.query.unsqueeze(-1)).squeeze(-1)   # (B, T)
scores = scores.masked_fill(mask == 0, -1e9)
weights = F.softmax(scores, dim=1) * mask.float()
pooled = torch.bmm(weights.unsqueeze(1), x).squeeze(1)
return pooled, weights
'''),
            "TweetClassifier": '''class TweetClassifier(nn.Module):
    def __init__(self, vectors, pooling="attention", n_classes=2):
        super().__init__()
        d_model = vectors.shape[1]
        self.pooling = pooling
        self.embed = nn.Embedding.from_pretrained(vectors, freeze=True, padding_idx=0)
        self.pool = AttentionPooling(d_model) if pooling == "attention" else None
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, ids, mask):
        x = self.embed(ids)
        if self.pooling == "mean":
            weights = mask.float() / mask.float().sum(dim=1, keepdim=True).clamp_min(1.0)
            pooled = mean_pooling(x, mask)
        else:
            pooled, weights = self.pool(x, mask)
        return self.head(pooled), weights
''',
        },
        "must_fail": [],
    },
    "logsumexp_style": {
        # exp(scores - logsumexp(scores)) over the real tokens; empty rows give zeros by a where.
        "replace": {"AttentionPooling": _attention('''
scores = (x * self.query).sum(dim=-1).masked_fill(~mask, float("-inf"))      # (B, T)
lse = torch.logsumexp(scores, dim=-1, keepdim=True)                          # -inf on empty rows
weights = torch.where(mask, torch.exp(scores - lse), torch.zeros_like(scores))
pooled = (weights.unsqueeze(-1) * x).sum(dim=1)
return pooled, weights
''')},
        "must_fail": [],
    },
}

# ---------------------------------------------------------------------------------------- issue 42
# Found by a second learner: the text said masking with torch.finfo(dtype).min alone gives a fully padded row
# zero weights; it gives a uniform row, and the message spoke of a NaN the learner never saw.
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
from planting import derived as _derived  # noqa: E402

VARIANTS.update({
    "attention_finfo_min_only": {
        "replace": {"AttentionPooling": _derived(LESSON, "AttentionPooling",
                                                 ("        weights = weights.masked_fill(~mask, 0.0)                      # only changes fully padded rows\n", ""))},
        "must_fail": ["test_attention_pooling_fully_padded"],
        "says": {"test_attention_pooling_fully_padded": ["uniform", "after the softmax"]},
    },
})

# ---------------------------------------------------------------------------------------- issue 42 (certificate)
# Survivors of the fairness certificate: a finite fill (-1e4) loses once the real scores fall below it; the
# classifier's mean-pooling weights divide by a length clamped at 2 (a one-word tweet gets half its vector)
# or at 0 (a fully padded row gives 0/0 = NaN).
_LENGTHS = "lengths = mask.sum(dim=-1, keepdim=True).clamp(min=1)"
VARIANTS.update({
    "attention_fill_minus_1e4": {
        "replace": {"AttentionPooling": _derived(LESSON, "AttentionPooling", (
            "scores.masked_fill(~mask, torch.finfo(scores.dtype).min)", "scores.masked_fill(~mask, -1e4)"))},
        "must_fail": ["test_attention_pooling_padding_zero"],
        "says": {"test_attention_pooling_padding_zero": ["-1e4", "-inf"]},
    },
    "classifier_mean_lengths_clamped_at_2": {
        "replace": {"TweetClassifier": _derived(LESSON, "TweetClassifier", (_LENGTHS, _LENGTHS.replace("min=1", "min=2")))},
        "must_fail": ["test_tweet_classifier"],
        "says": {"test_tweet_classifier": ["one-word tweet"]},
    },
    "classifier_mean_lengths_clamped_at_0": {
        "replace": {"TweetClassifier": _derived(LESSON, "TweetClassifier", (_LENGTHS, _LENGTHS.replace("min=1", "min=0")))},
        "must_fail": ["test_tweet_classifier"],
        "says": {"test_tweet_classifier": ["fully padded row"]},
    },
})
EXTENDED = ["classifier_mean_lengths_clamped_at_0"]  # another variant of the bug above, same cell
