"""Reusable models of earlier lessons, for later lessons' experiments (never a graded answer).

``seq2seq``: lesson 02's GRU encoder-decoder with pluggable attention and decoder step (lessons 02 and 03;
lesson 08 trains it beside its Transformer).
``transformer``: lesson 08's experiment tools (training and evaluating a translator, alignment scores).
``cnn``: a small convolutional baseline for lesson 11's images.
"""
