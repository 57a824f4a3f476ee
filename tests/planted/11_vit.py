"""Planted-bug submissions and correct alternative styles for lesson 11 (the Vision Transformer).

Each variant replaces whole solution cells (by grade_id) of the reference solution; ``must_fail``
lists the test cells (by grade_id) that must lose points. An empty ``must_fail`` marks a correct
solution in another style, which must keep full marks.
"""

LESSON = "11_vit"

# --------------------------------------------------------------------------------------------
# patchify
# --------------------------------------------------------------------------------------------

PATCHIFY_TEMPLATE = '''
def patchify(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, H // p, p, W // p, p)           # (B, C, rows, i, cols, j)
    x = x.permute({order})
    return x.reshape(B, (H // p) * (W // p), C * p * p)
'''

PATCHIFY_GRID_COLUMN_MAJOR = PATCHIFY_TEMPLATE.format(order="0, 4, 2, 1, 3, 5")      # patches column by column
PATCHIFY_PIXELS_COLUMN_MAJOR = PATCHIFY_TEMPLATE.format(order="0, 2, 4, 1, 5, 3")    # inside a patch: (C, j, i)
PATCHIFY_CHANNELS_LAST = PATCHIFY_TEMPLATE.format(order="0, 2, 4, 3, 5, 1")          # (p, p, C), channels last

PATCHIFY_NAIVE_RESHAPE = '''
def patchify(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    return images.reshape(B, (H // p) * (W // p), C * p * p)    # reads runs of one image row as "patches"
'''

PATCHIFY_SWAPS_H_AND_W = '''
def patchify(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, W // p, p, H // p, p)           # H and W swapped: right only for square images
    x = x.permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, (H // p) * (W // p), C * p * p)
'''

PATCHIFY_UNFOLD_STYLE = '''
def patchify(images, patch_size):
    cols = F.unfold(images, kernel_size=patch_size, stride=patch_size)    # (B, C*p*p, N)
    return cols.transpose(1, 2)                                           # (B, N, C*p*p)
'''

PATCHIFY_TENSOR_UNFOLD_STYLE = '''
def patchify(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    x = images.unfold(2, p, p).unfold(3, p, p)          # (B, C, H/p, W/p, p, p)
    x = x.permute(0, 2, 3, 1, 4, 5).contiguous()        # (B, H/p, W/p, C, p, p)
    return x.view(B, -1, C * p * p)
'''

PATCHIFY_LOOP_STYLE = '''
def patchify(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    patches = []
    for r in range(0, H, p):
        for c in range(0, W, p):
            patches.append(images[:, :, r:r + p, c:c + p].reshape(B, -1))   # (B, C*p*p)
    return torch.stack(patches, dim=1)
'''

PATCHIFY_EINSUM_STYLE = '''
def patchify(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, H // p, p, W // p, p)
    x = torch.einsum("bchiwj->bhwcij", x)
    return x.reshape(B, -1, C * p * p)
'''

# --------------------------------------------------------------------------------------------
# PatchEmbedding
# --------------------------------------------------------------------------------------------

EMBED_USES_CONV = '''
class PatchEmbedding(nn.Module):
    def __init__(self, image_size, patch_size, in_channels, d_model):
        super().__init__()
        self.patch_size = patch_size
        self.n_patches = (image_size // patch_size) ** 2
        self.proj = nn.Linear(in_channels * patch_size * patch_size, d_model)

    def forward(self, images):
        D, p, C = self.proj.out_features, self.patch_size, images.shape[1]
        kernel = self.proj.weight.view(D, C, p, p)
        return F.conv2d(images, kernel, self.proj.bias, stride=p).flatten(2).transpose(1, 2)   # the shortcut
'''

EMBED_NO_BIAS = '''
class PatchEmbedding(nn.Module):
    def __init__(self, image_size, patch_size, in_channels, d_model):
        super().__init__()
        self.patch_size = patch_size
        self.n_patches = (image_size // patch_size) ** 2
        self.proj = nn.Linear(in_channels * patch_size * patch_size, d_model, bias=False)

    def forward(self, images):
        return self.proj(patchify(images, self.patch_size))
'''

EMBED_EINSUM_STYLE = '''
class PatchEmbedding(nn.Module):
    def __init__(self, image_size, patch_size, in_channels, d_model):
        super().__init__()
        self.patch_size = patch_size
        self.n_patches = (image_size // patch_size) ** 2
        self.proj = nn.Linear(in_channels * patch_size * patch_size, d_model)

    def forward(self, images):
        patches = patchify(images, self.patch_size)                         # (B, N, C*p*p)
        return torch.einsum("bnk,dk->bnd", patches, self.proj.weight) + self.proj.bias
'''

# --------------------------------------------------------------------------------------------
# ViTEmbeddings
# --------------------------------------------------------------------------------------------

EMBEDDINGS_TEMPLATE = '''
class ViTEmbeddings(nn.Module):
    def __init__(self, image_size, patch_size, in_channels, d_model, dropout=0.0):
        super().__init__()
        self.patch_embed = PatchEmbedding(image_size, patch_size, in_channels, d_model)
        n = self.patch_embed.n_patches
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, d_model))
        self.pos_embedding = nn.Parameter(0.02 * torch.randn(1, n + 1, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, images):
        tokens = self.patch_embed(images)
        cls = self.cls_token.expand(tokens.shape[0], -1, -1)
{body}
'''

EMBEDDINGS_CLS_AFTER_POSITIONS = EMBEDDINGS_TEMPLATE.format(body='''\
        tokens = tokens + self.pos_embedding[:, 1:]          # positions first ...
        z = torch.cat([cls, tokens], dim=1)                  # ... then the class token, which gets none
        return self.dropout(z)''')

EMBEDDINGS_NO_POSITIONS = EMBEDDINGS_TEMPLATE.format(body='''\
        z = torch.cat([cls, tokens], dim=1)                  # positions forgotten
        return self.dropout(z)''')

EMBEDDINGS_CLS_AT_THE_END = EMBEDDINGS_TEMPLATE.format(body='''\
        z = torch.cat([tokens, cls], dim=1) + self.pos_embedding     # class token appended, not prepended
        return self.dropout(z)''')

EMBEDDINGS_NO_DROPOUT = EMBEDDINGS_TEMPLATE.format(body='''\
        return torch.cat([cls, tokens], dim=1) + self.pos_embedding   # self.dropout never applied''')

EMBEDDINGS_PREALLOCATE_STYLE = EMBEDDINGS_TEMPLATE.format(body='''\
        B, N, D = tokens.shape
        z = tokens.new_empty(B, N + 1, D)
        z = torch.index_copy(z, 1, torch.tensor([0]), cls)
        z = torch.index_copy(z, 1, torch.arange(1, N + 1), tokens)
        return F.dropout(z + self.pos_embedding, self.dropout.p, self.training)''')

EMBEDDINGS_REPEAT_STYLE = EMBEDDINGS_TEMPLATE.format(body='''\
        pos_cls, pos_patches = self.pos_embedding[:, :1], self.pos_embedding[:, 1:]
        first = self.cls_token.repeat(tokens.shape[0], 1, 1) + pos_cls       # the class token with position 0
        return self.dropout(torch.cat((first, tokens + pos_patches), 1))''')

# --------------------------------------------------------------------------------------------
# ViT
# --------------------------------------------------------------------------------------------

VIT_TEMPLATE = '''
class ViT(nn.Module):
    def __init__(self, image_size, patch_size, in_channels, n_classes, d_model, n_layers, n_heads, d_ff,
                 dropout=0.0, eps=1e-12):
        super().__init__()
        self.embeddings = ViTEmbeddings(image_size, patch_size, in_channels, d_model, dropout)
        self.blocks = nn.ModuleList([
            nn.TransformerEncoderLayer(d_model, n_heads, d_ff, {block_dropout}, activation={act}, layer_norm_eps={block_eps},
                                       batch_first=True, norm_first={norm_first})
            for _ in range(n_layers)
        ])
        self.norm = nn.LayerNorm(d_model, eps={final_eps})
        self.head = nn.Linear(d_model, n_classes)

    def encode(self, images):
        z = self.embeddings(images)
        for block in self.blocks:
            z = block(z)
        return {final}

    def forward(self, images):
        return self.head(self.encode(images){readout})
'''

_OK = dict(block_dropout="dropout", act='"gelu"', block_eps="eps", norm_first="True", final_eps="eps",
           final="self.norm(z)", readout="[:, 0]")


def _vit(**changes):
    return VIT_TEMPLATE.format(**{**_OK, **changes})


VIT_READS_LAST_TOKEN = _vit(readout="[:, -1]")                 # the class token is at index 0
VIT_READS_FIRST_PATCH = _vit(readout="[:, 1]")
VIT_MEAN_POOLS = _vit(readout=".mean(dim=1)")
VIT_POST_NORM = _vit(norm_first="False")
VIT_RELU = _vit(act='"relu"')
VIT_TANH_GELU = _vit(act='lambda h: F.gelu(h, approximate="tanh")')
VIT_NO_FINAL_NORM = _vit(final="z")
VIT_EPS_IGNORED = _vit(block_eps="1e-12", final_eps="1e-12")
VIT_NO_BLOCK_DROPOUT = _vit(block_dropout="0.0")
VIT_GELU_FUNCTION_STYLE = _vit(act="F.gelu")

# transformers' ViTModel has a pooler (dense + tanh on the class token) that ViTForImageClassification never
# uses: a learner who keeps one, unused, still builds the ViT the docstring asks for.
VIT_UNUSED_POOLER_STYLE = _vit().replace(
    "        self.head = nn.Linear(d_model, n_classes)\n",
    "        self.head = nn.Linear(d_model, n_classes)\n        self.pooler = nn.Sequential(nn.Linear(d_model, d_model), nn.Tanh())\n")
assert "self.pooler" in VIT_UNUSED_POOLER_STYLE

VIT_SEQUENTIAL_STYLE = '''
class ViT(nn.Module):
    def __init__(self, image_size, patch_size, in_channels, n_classes, d_model, n_layers, n_heads, d_ff,
                 dropout=0.0, eps=1e-12):
        super().__init__()
        self.embeddings = ViTEmbeddings(image_size, patch_size, in_channels, d_model, dropout)
        layer = lambda: nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout, "gelu", eps, True, True)
        self.blocks = nn.Sequential(*[layer() for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model, eps)
        self.head = nn.Linear(d_model, n_classes)

    def encode(self, images):
        return self.norm(self.blocks(self.embeddings(images)))

    def forward(self, images):
        cls = self.encode(images).select(1, 0)        # (B, D)
        return cls @ self.head.weight.T + self.head.bias
'''

VIT_HAND_WRITTEN_BLOCK_STYLE = '''
class _PreNormBlock(nn.Module):
    """A hand-written pre-norm block with nn.TransformerEncoderLayer's parameter names."""

    def __init__(self, d_model, n_heads, d_ff, dropout, eps):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.norm1, self.norm2 = nn.LayerNorm(d_model, eps=eps), nn.LayerNorm(d_model, eps=eps)
        self.drop = nn.Dropout(dropout)

    def forward(self, z):
        h = self.norm1(z)
        z = z + self.drop(self.self_attn(h, h, h, need_weights=False)[0])
        h = self.linear2(self.drop(F.gelu(self.linear1(self.norm2(z)))))
        return z + self.drop(h)


class ViT(nn.Module):
    def __init__(self, image_size, patch_size, in_channels, n_classes, d_model, n_layers, n_heads, d_ff,
                 dropout=0.0, eps=1e-12):
        super().__init__()
        self.embeddings = ViTEmbeddings(image_size, patch_size, in_channels, d_model, dropout)
        self.blocks = nn.ModuleList([_PreNormBlock(d_model, n_heads, d_ff, dropout, eps) for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.head = nn.Linear(d_model, n_classes)

    def encode(self, images):
        z = self.embeddings(images)
        for block in self.blocks:
            z = block(z)
        return self.norm(z)

    def forward(self, images):
        return self.head(self.encode(images)[:, 0])
'''


# --------------------------------------------------------------------------------------------
# one layer shared by the whole stack: derived from the reference solution by a one-line change
# --------------------------------------------------------------------------------------------
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
from planting import solution_sources as _solution_sources  # noqa: E402


def _shared_stack(cell, old, new):
    src = _solution_sources(LESSON)[cell]
    assert src.count(old) == 1, f"{LESSON}: the reference {cell} changed; update the shared-stack variant"
    return src.replace(old, new)

VIT_ONE_SHARED_BLOCK = _shared_stack('ViT', '            for _ in range(n_layers)\n        ])',
    '        ] * n_layers)  # ONE block in every place')


VARIANTS = {
    'vit_one_shared_block': {"replace": {'ViT': VIT_ONE_SHARED_BLOCK}, "must_fail": ['test_vit_shapes']},
    # patchify
    "patchify_grid_column_major": {"replace": {"patchify": PATCHIFY_GRID_COLUMN_MAJOR},
                                   "must_fail": ["test_patchify_row_major"]},
    "patchify_pixels_column_major": {"replace": {"patchify": PATCHIFY_PIXELS_COLUMN_MAJOR},
                                     "must_fail": ["test_patchify_row_major"]},
    "patchify_channels_last": {"replace": {"patchify": PATCHIFY_CHANNELS_LAST},
                               "must_fail": ["test_patchify_channels_first"]},
    "patchify_naive_reshape": {"replace": {"patchify": PATCHIFY_NAIVE_RESHAPE},
                               "must_fail": ["test_patchify_row_major", "test_patchify_channels_first"]},
    "patchify_swaps_h_and_w": {"replace": {"patchify": PATCHIFY_SWAPS_H_AND_W},
                               "must_fail": ["test_patchify_row_major", "test_patchify_channels_first"]},
    "patchify_unfold_style": {"replace": {"patchify": PATCHIFY_UNFOLD_STYLE}, "must_fail": []},
    "patchify_tensor_unfold_style": {"replace": {"patchify": PATCHIFY_TENSOR_UNFOLD_STYLE}, "must_fail": []},
    "patchify_loop_style": {"replace": {"patchify": PATCHIFY_LOOP_STYLE}, "must_fail": []},
    "patchify_einsum_style": {"replace": {"patchify": PATCHIFY_EINSUM_STYLE}, "must_fail": []},
    # PatchEmbedding
    "patch_embedding_calls_conv2d": {"replace": {"PatchEmbedding": EMBED_USES_CONV},
                                     "must_fail": ["test_patch_embedding_is_strided_conv"]},
    "patch_embedding_no_bias": {"replace": {"PatchEmbedding": EMBED_NO_BIAS},
                                "must_fail": ["test_patch_embedding_shapes"]},
    "patch_embedding_einsum_style": {"replace": {"PatchEmbedding": EMBED_EINSUM_STYLE}, "must_fail": []},
    # ViTEmbeddings
    "class_token_added_after_positions": {"replace": {"ViTEmbeddings": EMBEDDINGS_CLS_AFTER_POSITIONS},
                                          "must_fail": ["test_vit_embeddings_class_token"]},
    "patch_embedding_without_positions": {"replace": {"ViTEmbeddings": EMBEDDINGS_NO_POSITIONS},
                                          "must_fail": ["test_vit_embeddings_positions"]},
    "class_token_appended_at_the_end": {"replace": {"ViTEmbeddings": EMBEDDINGS_CLS_AT_THE_END},
                                        "must_fail": ["test_vit_embeddings_class_token", "test_vit_embeddings_positions"]},
    "embeddings_without_dropout": {"replace": {"ViTEmbeddings": EMBEDDINGS_NO_DROPOUT},
                                   "must_fail": ["test_vit_embeddings_dropout", "test_vit_dropout"]},
    "embeddings_preallocate_style": {"replace": {"ViTEmbeddings": EMBEDDINGS_PREALLOCATE_STYLE}, "must_fail": []},
    "embeddings_repeat_style": {"replace": {"ViTEmbeddings": EMBEDDINGS_REPEAT_STYLE}, "must_fail": []},
    # ViT
    "class_token_read_from_last_index": {"replace": {"ViT": VIT_READS_LAST_TOKEN},
                                         "must_fail": ["test_vit_class_token_readout", "test_vit_matches_transformers"]},
    "class_token_read_from_index_1": {"replace": {"ViT": VIT_READS_FIRST_PATCH},
                                      "must_fail": ["test_vit_class_token_readout", "test_vit_matches_transformers"]},
    "vit_mean_pools_instead_of_class_token": {"replace": {"ViT": VIT_MEAN_POOLS},
                                              "must_fail": ["test_vit_class_token_readout", "test_vit_matches_transformers"]},
    "vit_post_norm_blocks": {"replace": {"ViT": VIT_POST_NORM}, "must_fail": ["test_vit_matches_transformers"]},
    "vit_relu_instead_of_gelu": {"replace": {"ViT": VIT_RELU}, "must_fail": ["test_vit_matches_transformers"]},
    "vit_tanh_approximate_gelu": {"replace": {"ViT": VIT_TANH_GELU}, "must_fail": ["test_vit_matches_transformers"]},
    "vit_no_final_norm": {"replace": {"ViT": VIT_NO_FINAL_NORM}, "must_fail": ["test_vit_matches_transformers"]},
    "vit_eps_ignored": {"replace": {"ViT": VIT_EPS_IGNORED}, "must_fail": ["test_vit_matches_transformers"]},
    "vit_no_dropout_in_blocks": {"replace": {"ViT": VIT_NO_BLOCK_DROPOUT}, "must_fail": ["test_vit_dropout"]},
    "vit_gelu_function_style": {"replace": {"ViT": VIT_GELU_FUNCTION_STYLE}, "must_fail": []},
    "vit_sequential_style": {"replace": {"ViT": VIT_SEQUENTIAL_STYLE}, "must_fail": []},
    "vit_hand_written_block_style": {"replace": {"ViT": VIT_HAND_WRITTEN_BLOCK_STYLE}, "must_fail": []},
    "vit_unused_pooler_style": {"replace": {"ViT": VIT_UNUSED_POOLER_STYLE}, "must_fail": []},
}

# Graded only with COURSE_PLANTED=all (tests/planting.py): further variants of bugs the core bank already
# catches in the same cells, kept runnable without costing `make test` its time budget.
EXTENDED = [
    "patchify_naive_reshape", "patchify_swaps_h_and_w", "patchify_tensor_unfold_style", "patchify_einsum_style",
    "class_token_appended_at_the_end", "class_token_read_from_index_1", "vit_tanh_approximate_gelu",
    "vit_no_final_norm", "embeddings_repeat_style", "vit_sequential_style",
]
