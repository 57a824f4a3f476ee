"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2.
"""

LESSON = "11_vit"
VARIANTS = {
    "patch_embedding_functional_linear_style": {
        "blind": True, "style": "F.linear on patchify's output, n_patches from integer division",
        "replace": {"PatchEmbedding": '''
class PatchEmbedding(nn.Module):
    def __init__(self, image_size, patch_size, in_channels, d_model):
        super().__init__()
        self.patch_size = patch_size
        self.n_patches = (image_size // patch_size) ** 2
        self.proj = nn.Linear(in_channels * patch_size * patch_size, d_model)

    def forward(self, images):
        return F.linear(patchify(images, self.patch_size), self.proj.weight, self.proj.bias)
'''},
        "must_fail": [],
    },
    "patch_embedding_einsum_bias_style": {
        "blind": True, "style": "einsum with the layer's weight, bias added",
        "replace": {"PatchEmbedding": '''
class PatchEmbedding(nn.Module):
    def __init__(self, image_size, patch_size, in_channels, d_model):
        super().__init__()
        side = image_size // patch_size
        self.patch_size = patch_size
        self.n_patches = side * side
        self.proj = nn.Linear(in_channels * patch_size ** 2, d_model, bias=True)

    def forward(self, images):
        x = patchify(images, self.patch_size)                 # (B, N, C*p*p)
        return torch.einsum("bnk,dk->bnd", x, self.proj.weight) + self.proj.bias
'''},
        "must_fail": [],
    },
    "vit_embeddings_expand_cat_style": {
        "blind": True, "style": "the class token expanded over the batch, torch.cat, F.dropout",
        "replace": {"ViTEmbeddings": '''
class ViTEmbeddings(nn.Module):
    def __init__(self, image_size, patch_size, in_channels, d_model, dropout=0.0):
        super().__init__()
        self.patch_embed = PatchEmbedding(image_size, patch_size, in_channels, d_model)
        n = self.patch_embed.n_patches
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, d_model))
        self.pos_embedding = nn.Parameter(0.02 * torch.randn(1, n + 1, d_model))
        self.p = dropout

    def forward(self, images):
        tokens = self.patch_embed(images)                               # (B, N, D)
        cls = self.cls_token.expand(tokens.shape[0], -1, -1)            # (B, 1, D)
        z = torch.cat((cls, tokens), dim=1) + self.pos_embedding
        return F.dropout(z, p=self.p, training=self.training)
'''},
        "must_fail": [],
    },
}
