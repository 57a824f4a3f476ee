"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2.
"""

LESSON = "02_rnn_attention"
VARIANTS = {
    "step_split_output_weights_style": {
        "blind": True, "style": "the output layer's weight split into its three blocks",
        "replace": {"decode_step": '''
def decode_step(decoder, y_prev, s_prev, states, mask):
    e = decoder.embedding(y_prev)                                   # (B, E)
    c, weights = decoder.attention(s_prev, states, states, mask)    # (B, Dk), (B, S)
    s = decoder.cell(torch.cat([e, c], dim=1), s_prev)              # (B, H)
    H, Dk = s.shape[1], c.shape[1]
    W = decoder.out.weight
    logits = s @ W[:, :H].T + c @ W[:, H:H + Dk].T + e @ W[:, H + Dk:].T
    if decoder.out.bias is not None:
        logits = logits + decoder.out.bias
    return logits, s, weights
'''},
        "must_fail": [],
    },
    "step_hstack_style": {
        "blind": True, "style": "torch.hstack for the concatenations",
        "replace": {"decode_step": '''
def decode_step(decoder, y_prev, s_prev, states, mask):
    word = decoder.embedding(y_prev)
    context, alpha = decoder.attention(s_prev, states, states, mask)
    state = decoder.cell(torch.hstack((word, context)), s_prev)
    logits = decoder.out(torch.hstack((state, context, word)))
    return logits, state, alpha
'''},
        "must_fail": [],
    },
}
