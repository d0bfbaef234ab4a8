"""Margins of CSR rows against a weight vector (prediction and evaluation)."""

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def csr_margins(indptr, indices, data, w):
    """``out[i] = sum_k data[k] * w[indices[k]]`` over row i, ignoring ids ``>= len(w)``.

    Ignoring unseen ids is LIBLINEAR's rule: features that never occurred in
    training have weight zero.
    """
    n = len(indptr) - 1
    d = len(w)
    out = np.zeros(n)
    for i in range(n):
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            if j < d:
                s += data[k] * w[j]
        out[i] = s
    return out
