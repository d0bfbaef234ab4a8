"""A store replaced while a command reads it (an in-place ``ooc append`` or ``convert --overwrite`` swapping a
new store in: writers hold the store's lock, readers hold none) is named as replaced, never as damaged: a
user told "corrupted" may delete a good store."""

from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.sparse as sp

import ooc
from ooc.store.backend import StoreCorruptError, StoreError


def _store(path, seed):
    rng = np.random.default_rng(seed)
    X = sp.random(3000, 40, density=0.2, random_state=seed, format="csr")
    ooc.convert(X, str(path), y=np.where(rng.standard_normal(3000) > 0, 1.0, -1.0), block_bytes="16KiB").close()


def test_a_store_replaced_while_read_is_named_so(tmp_path):
    a, b = tmp_path / "a.zarr", tmp_path / "b.zarr"
    _store(a, 1)
    _store(b, 2)
    st = ooc.open_store(str(a))
    try:
        os.rename(a, tmp_path / "old.zarr")
        os.rename(b, a)
        with pytest.raises(StoreError) as e:
            for i in range(st.n_blocks("rows")):
                st.block("rows", i)
        assert not isinstance(e.value, StoreCorruptError) and "was replaced while this command read it" in str(e.value)
    finally:
        st.close()
