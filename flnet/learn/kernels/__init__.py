"""Kernels: fast paths of local training, each an accelerator of a named readable path.

A kernel computes what a readable path computes (here: the cohort's mean cross-entropy and its
gradient by autograd through the plain ``nn.Module``, `cohort.autograd_value_and_grad`), only
faster, and must equal it within a stated tolerance. Each module's docstring names its readable
path and the tolerance; its tests (tests/test_kernels_<module>.py) are named after both.
"""
