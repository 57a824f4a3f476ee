"""Units for lesson 11's package code: the image data (course.data.images), the CNN baseline
(course.models.cnn) and the bridge to transformers' ViT (course.oracles.vit). Seeded and fast."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course.data import images
from course.models.cnn import SmallCNN, count_parameters


@pytest.fixture(scope="module")
def digits():
    return images.digits(seed=0)


def test_digits_split_is_fixed_stratified_and_disjoint(digits):
    assert digits.train_x.shape == (1347, 1, 8, 8) and digits.test_x.shape == (450, 1, 8, 8)
    assert digits.train_x.dtype == torch.float32 and 0 <= digits.train_x.min() and digits.train_x.max() <= 1
    counts = torch.bincount(digits.test_y, minlength=10)
    assert counts.min() >= 44 and counts.max() <= 46                     # a quarter of each class (~180)
    again = images.digits(seed=0)
    assert torch.equal(again.test_x, digits.test_x) and torch.equal(again.train_y, digits.train_y)
    other = images.digits(seed=1)
    assert not torch.equal(other.test_x, digits.test_x)
    # no test image is also a training image (the raw dataset has no exact duplicates across the split)
    train = {tuple(x.flatten().tolist()) for x in digits.train_x}
    assert sum(tuple(x.flatten().tolist()) in train for x in digits.test_x) <= 2


def test_subset_is_balanced_and_seeded(digits):
    x, y = images.subset(digits.train_x, digits.train_y, 53, seed=3)
    assert x.shape == (53, 1, 8, 8)
    counts = torch.bincount(y, minlength=10)
    assert counts.max() - counts.min() <= 1
    x2, y2 = images.subset(digits.train_x, digits.train_y, 53, seed=3)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    full_x, _ = images.subset(digits.train_x, digits.train_y, 10_000)
    assert full_x is digits.train_x


def test_random_shift_moves_each_image_by_at_most_max_shift():
    x = torch.zeros(50, 2, 8, 8)
    x[:, :, 3, 4] = 1.0                                                  # one lit pixel per channel, inside the border
    out = images.random_shift(x, 2, generator=torch.Generator().manual_seed(0))
    assert out.shape == x.shape
    pos = out[:, 0].flatten(1).argmax(1)
    rows, cols = pos // 8, pos % 8
    assert ((rows - 3).abs() <= 2).all() and ((cols - 4).abs() <= 2).all()
    assert torch.equal(out[:, 0], out[:, 1])                             # channels move together
    assert len(set(zip(rows.tolist(), cols.tolist()))) > 10              # the moves vary
    assert torch.equal(out.sum(dim=(1, 2, 3)), x.sum(dim=(1, 2, 3)))     # nothing lost away from the border
    assert images.random_shift(x, 0) is x


def test_shapes_labels_say_same_or_different():
    x, y, gaps = images.shapes(300, seed=0, image_size=24, cell=4)
    assert x.shape == (300, 1, 24, 24) and y.shape == gaps.shape == (300,)
    assert 0.4 < y.float().mean() < 0.6
    assert set(gaps.unique().tolist()) <= {4, 8, 12, 16, 20}
    glyphs = list(images.GLYPHS.values())
    for img, label, gap in zip(x[:, 0], y, gaps):
        # each glyph sits inside one 4x4 cell: find the two inked cells and read the glyphs there
        cells = img.reshape(6, 4, 6, 4).permute(0, 2, 1, 3)             # (6, 6, 4, 4)
        inked = cells.flatten(2).sum(-1).nonzero().tolist()
        assert len(inked) == 2
        found = [cells[r, c, :3, :3] for r, c in inked]
        kinds = [next(i for i, gl in enumerate(glyphs) if torch.equal(f, gl)) for f in found]
        assert (kinds[0] == kinds[1]) == bool(label)
        assert abs(inked[0][1] - inked[1][1]) * 4 == int(gap)
    again = images.shapes(300, seed=0, image_size=24, cell=4)
    assert torch.equal(again[0], x)


def test_shapes_any_pixel_and_bad_arguments():
    x, y, gaps = images.shapes(100, seed=1, image_size=16, min_gap=5, max_gap=9, noise=0.01)
    assert gaps.min() >= 5 and gaps.max() <= 9
    assert x.shape == (100, 1, 16, 16)
    with pytest.raises(ValueError):
        images.shapes(10, image_size=8, cell=4, min_gap=8)


def test_small_cnn_shapes_parameters_and_receptive_field():
    model = SmallCNN(1, 10, width=8).eval()
    assert model(torch.randn(3, 1, 8, 8)).shape == (3, 10)
    assert count_parameters(model) == sum(p.numel() for p in model.parameters())
    # the receptive field, measured: which input pixels move the centre unit of the last convolution?
    x = torch.randn(1, 1, 32, 32, generator=torch.Generator().manual_seed(0)).requires_grad_()
    model.features(x)[0, :, 8, 8].sum().backward()
    rows = x.grad[0, 0].abs().sum(1).nonzero().squeeze(1)
    assert 8 < rows.max() - rows.min() + 1 <= model.receptive_field
    assert model.receptive_field == 14


class _TinyViT(nn.Module):
    """A ViT written with the lesson's parameter names (test fixture, not the lesson's answer)."""

    def __init__(self, S, p, C, K, D, L, H, F_, eps):
        super().__init__()
        self.p = p
        self.embeddings = nn.Module()
        self.embeddings.patch_embed = nn.Module()
        self.embeddings.patch_embed.proj = nn.Linear(C * p * p, D)
        self.embeddings.cls_token = nn.Parameter(torch.randn(1, 1, D))
        self.embeddings.pos_embedding = nn.Parameter(torch.randn(1, (S // p) ** 2 + 1, D))
        self.blocks = nn.ModuleList([nn.TransformerEncoderLayer(D, H, F_, 0.0, "gelu", eps, batch_first=True,
                                                                norm_first=True) for _ in range(L)])
        self.norm = nn.LayerNorm(D, eps=eps)
        self.head = nn.Linear(D, K)

    def encode(self, x):
        patches = nn.functional.unfold(x, self.p, stride=self.p).transpose(1, 2)
        z = self.embeddings.patch_embed.proj(patches)
        z = torch.cat([self.embeddings.cls_token.expand(len(x), -1, -1), z], 1) + self.embeddings.pos_embedding
        for block in self.blocks:
            z = block(z)
        return self.norm(z)

    def forward(self, x):
        return self.head(self.encode(x)[:, 0])


def test_to_hf_vit_copies_every_weight():
    from course.oracles.vit import to_hf_vit

    torch.manual_seed(0)
    cfg = dict(image_size=12, patch_size=4, in_channels=3, d_model=16, n_layers=2, n_heads=4, d_ff=24, n_classes=5,
               eps=1e-6)
    ours = _TinyViT(12, 4, 3, 5, 16, 2, 4, 24, 1e-6).eval()
    x = torch.randn(2, 3, 12, 12)
    base, head = to_hf_vit(ours, **cfg), to_hf_vit(ours, classifier=True, **cfg)
    with torch.no_grad():
        assert torch.allclose(base(pixel_values=x).last_hidden_state, ours.encode(x), atol=1e-5)
        assert torch.allclose(head(pixel_values=x).logits, ours(x), atol=1e-5)
        maps = base(pixel_values=x, output_attentions=True).attentions
    assert len(maps) == 2 and maps[0].shape == (2, 4, 10, 10)
    state = ours.state_dict()
    del state["norm.weight"]
    with pytest.raises(AssertionError, match="norm.weight"):
        to_hf_vit(state, **cfg)
