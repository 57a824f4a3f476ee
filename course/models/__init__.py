"""Reusable models of earlier lessons, for later lessons' experiments (never a graded answer).

``seq2seq``: lesson 02's GRU encoder-decoder with a pluggable attention module (lessons 02, 03, 08).
"""
