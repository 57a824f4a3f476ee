"""Reusable models of earlier lessons, for later lessons' experiments (never a graded answer).

``seq2seq``: lesson 02's GRU encoder-decoder with pluggable attention and decoder step (lessons 02 and 03; lesson 08, coming, compares with it).
"""
